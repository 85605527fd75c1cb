import * as vscode from 'vscode';
import { SetSchedulePaused, type ScheduleStatus } from '../shared/protocol';
import type { AgentSession } from './agentSession';
import type { Notices } from './notices';
import { sendRequest } from './protocolCalls';
import type { ScheduleNode } from './scheduleTreeProvider';

/** The whole schedule, as a target: every fetcher. */
export const WHOLE_SCHEDULE = Symbol('whole schedule');
type Target = string | typeof WHOLE_SCHEDULE;

interface TargetItem extends vscode.QuickPickItem {
  target: Target;
}

/**
 * Pause and Resume of the Schedule view and the palette. From a row they act on that fetcher; from
 * the palette they ask which (one fetcher, or all of them, which is confirmed first: a paused
 * schedule starts nothing until someone resumes it); from the view's title, Resume lifts the
 * whole-schedule pause.
 */
export function registerSchedulePause(session: AgentSession, notices: Notices, log: vscode.LogOutputChannel): vscode.Disposable[] {
  const send = async (target: Target, paused: boolean): Promise<ScheduleStatus | undefined> => {
    const fetcher = target === WHOLE_SCHEDULE ? undefined : target;
    const what = fetcher ?? 'the whole schedule';
    try {
      const result = await sendRequest(session.client(), SetSchedulePaused.type, fetcher ? { paused, fetcher } : { paused });
      vscode.window.setStatusBarMessage(`Quantilica: ${what} ${paused ? 'paused' : 'resumed'}`, 5000);
      return result.schedule;
    } catch (err) {
      const detail = err instanceof Error ? err.message : String(err);
      log.warn(`could not ${paused ? 'pause' : 'resume'} ${what}: ${detail}`);
      void notices.show('error', `Quantilica: could not ${paused ? 'pause' : 'resume'} ${what}: ${detail}`);
      return undefined;
    }
  };

  const ask = async (paused: boolean): Promise<Target | undefined> => {
    const schedule = session.snapshot?.schedule;
    if (!schedule) return undefined;
    // Only fetchers with a schedule: pausing one that never comes due would change nothing.
    const entries = schedule.entries.filter((e) => e.cron !== null && (paused ? !e.paused : e.paused));
    const items: TargetItem[] = [];
    if (paused ? !schedule.paused : schedule.paused) {
      items.push({
        label: paused ? 'All Fetchers' : 'The Whole Schedule',
        description: paused ? 'pause the whole schedule' : 'resume every fetcher the whole-schedule pause holds',
        target: WHOLE_SCHEDULE,
      });
    }
    for (const e of entries)
      items.push({ label: e.fetcher, description: paused ? 'pause this fetcher only' : 'paused on its own', target: e.fetcher });
    if (items.length === 0) {
      void notices.show(
        'info',
        paused ? 'Quantilica: the whole schedule is paused already.' : 'Quantilica: nothing in the schedule is paused.',
      );
      return undefined;
    }
    const pick = await notices.pick(paused ? 'Pause the schedule of which fetcher?' : 'Resume which?', items);
    if (!pick) return undefined;
    if (
      pick.target === WHOLE_SCHEDULE &&
      paused &&
      !(await confirmPauseAll(notices, schedule.entries.filter((e) => e.cron !== null).length))
    )
      return undefined;
    return pick.target;
  };

  const targetOf = (node: ScheduleNode | string | undefined): Target | undefined => (typeof node === 'string' ? node : node?.fetcher);

  return [
    vscode.commands.registerCommand('quantilica.pauseSchedule', async (node?: ScheduleNode | string) => {
      const target = targetOf(node) ?? (await ask(true));
      return target === undefined ? undefined : send(target, true);
    }),
    vscode.commands.registerCommand('quantilica.resumeSchedule', async (node?: ScheduleNode | string) => {
      const target = targetOf(node) ?? (await ask(false));
      return target === undefined ? undefined : send(target, false);
    }),
    vscode.commands.registerCommand('quantilica.resumeWholeSchedule', () => send(WHOLE_SCHEDULE, false)),
  ];
}

async function confirmPauseAll(notices: Notices, count: number): Promise<boolean> {
  const yes = { label: 'Pause the Whole Schedule', description: `no scheduled run of the ${count} fetchers starts until you resume` };
  const no = { label: 'Cancel', description: 'keep the schedule running' };
  return (await notices.pick(`Pause all ${count} scheduled fetchers?`, [no, yes])) === yes;
}
