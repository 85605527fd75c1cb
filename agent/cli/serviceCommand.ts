import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import type { Command } from 'commander';
import { ClientError } from '../errors';
import { ExitCode } from '../exitCodes';
import { writeServiceEnvFile, type CarriedSetting } from './serviceEnvFile';
import { hasControlCharacter } from '../config/hasControlCharacter';

export const UNIT_NAME = 'quantilica-agent.service';

/** Where the user's units and the agent's environment file live (XDG_CONFIG_HOME, else ~/.config). */
export function servicePaths(env: NodeJS.ProcessEnv = process.env): { unitFile: string; envFile: string } {
  const home = env.HOME && env.HOME !== '' ? env.HOME : os.homedir();
  const config = env.XDG_CONFIG_HOME && path.isAbsolute(env.XDG_CONFIG_HOME) ? env.XDG_CONFIG_HOME : path.join(home, '.config');
  return { unitFile: path.join(config, 'systemd', 'user', UNIT_NAME), envFile: path.join(config, 'quantilica', 'agent.env') };
}

/**
 * The systemd user unit of the agent. KillMode=process: stopping or restarting the agent signals the
 * agent alone, so its fetchers keep running and keep their slots, and the next agent adopts them (as
 * the design says). Delegate=yes hands the agent its cgroup subtree for the per-pool and per-run
 * memory ceilings. Restart=on-failure brings it back after a crash, not after `systemctl stop`.
 */
export function unitText(nodePath: string, agentJs: string, envFile: string): string {
  for (const [what, value] of [
    ['the node binary', nodePath],
    ['the agent script', agentJs],
    ['the environment file', envFile],
  ] as const) {
    // A newline would end the setting early and make the rest a line of its own.
    if (hasControlCharacter(value)) {
      throw new ClientError(
        0,
        ExitCode.config,
        `${what}'s path ${JSON.stringify(value)} has a control character, which a systemd unit cannot hold; install from a path without one`,
      );
    }
  }
  // systemd expands %-specifiers (%h, %u) in both settings, and $VAR in command lines alone.
  const specifiers = (s: string) => s.replace(/%/g, '%%');
  const quote = (s: string) => (/^[A-Za-z0-9_@%+=:,./-]+$/.test(s) ? s : `"${s.replace(/(["\\])/g, '\\$1')}"`);
  const arg = (s: string) => quote(specifiers(s).replace(/\$/g, '$$$$'));
  return `[Unit]
Description=Quantilica collection orchestrator agent (pools, disk gate, schedule, telemetry)
Documentation=https://github.com/quantilica
After=network-online.target

[Service]
Type=simple
ExecStart=${arg(nodePath)} ${arg(agentJs)} agent
# Settings (QUANTILICA_*, CRON_*, DATA_DIR, QUANTILICA_DATABASE_URL); "-": the file may be absent.
EnvironmentFile=-${specifiers(envFile)}
Restart=on-failure
RestartSec=5
# The agent alone is stopped; running fetchers outlive it and the next agent adopts them.
KillMode=process
# The agent's cgroup subtree, for the memory ceilings of pools and runs.
Delegate=yes
TimeoutStopSec=60

[Install]
WantedBy=default.target
`;
}

/** systemctl --user needs to find the user's manager, and nothing of the agent's settings or secrets. */
function systemctlEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const name of [
    'PATH',
    'HOME',
    'USER',
    'LOGNAME',
    'LANG',
    'LC_ALL',
    'XDG_RUNTIME_DIR',
    'DBUS_SESSION_BUS_ADDRESS',
    'SYSTEMD_PAGER',
  ]) {
    const value = process.env[name];
    if (value !== undefined) env[name] = value;
  }
  return env;
}

function systemctl(args: string[]): { ok: boolean; status: number | null; stdout: string; out: string } {
  const r = spawnSync('systemctl', ['--user', ...args], { encoding: 'utf8', env: systemctlEnv() });
  return {
    ok: r.status === 0,
    status: r.status,
    stdout: r.stdout ?? '',
    out: `${r.stdout ?? ''}${r.stderr ?? ''}${r.error ? r.error.message : ''}`.trim(),
  };
}

/** The states `systemctl is-active` prints; anything else means it could not ask the user manager. */
const UNIT_STATES = new Set([
  'active',
  'reloading',
  'inactive',
  'failed',
  'activating',
  'deactivating',
  'maintenance',
  'refreshing',
  'unknown',
]);

function printCarried(carried: CarriedSetting[], envFile: string): void {
  const written = carried.filter((c) => c.outcome === 'written');
  process.stdout.write(
    written.length === 0
      ? `settings carried into ${envFile}: none (no CRON_*, QUANTILICA_* or DATA_DIR in this environment)\n`
      : `settings carried into ${envFile}:\n${written.map((c) => `  ${c.shown}\n`).join('')}`,
  );
  for (const c of carried) {
    if (c.outcome === 'secret-not-written')
      process.stdout.write(`  not written: ${c.shown} (a secret; --with-secrets writes it into this 0600 file)\n`);
    else if (c.outcome === 'control-character')
      process.stderr.write(
        `quantilica: not written: ${c.shown} holds a control character (a newline), which the environment file cannot hold\n`,
      );
  }
}

/** `quantilica service install|uninstall|status`. */
export function registerServiceCommand(program: Command, setExit: (code: number) => void): void {
  const service = program.command('service').description(`run the agent as a systemd user service (${UNIT_NAME})`);
  service
    .command('install')
    .description('write the unit and the environment file, then enable and start it')
    .option('--no-enable', 'only write the files')
    .option('--with-secrets', 'also write the secrets of this environment (database URLs, GITHUB_TOKEN) into the 0600 environment file')
    .action((opts: { enable: boolean; withSecrets?: boolean }) => {
      const { unitFile, envFile } = servicePaths();
      const agentJs = path.resolve(process.argv[1] ?? '');
      if (!fs.existsSync(agentJs)) throw new ClientError(0, ExitCode.usage, `cannot find the agent script (${agentJs})`);
      // Checked before anything is written: a path the unit cannot hold changes nothing.
      const unit = unitText(process.execPath, agentJs, envFile);
      fs.mkdirSync(path.dirname(unitFile), { recursive: true, mode: 0o700 });
      fs.mkdirSync(path.dirname(envFile), { recursive: true, mode: 0o700 });
      fs.writeFileSync(unitFile, unit, { mode: 0o600 });
      fs.chmodSync(unitFile, 0o600);
      const carried = writeServiceEnvFile(envFile, process.env, opts.withSecrets === true, UNIT_NAME);
      process.stdout.write(`wrote ${unitFile}\nsettings: ${envFile}\n`);
      printCarried(carried, envFile);
      if (!opts.enable) return;
      const steps = [['daemon-reload'], ['enable', '--now', UNIT_NAME]];
      for (const step of steps) {
        const r = systemctl(step);
        if (!r.ok) {
          process.stderr.write(
            `systemctl --user ${step.join(' ')} failed: ${r.out}\nThe unit is written; enable it where a user manager runs: systemctl --user enable --now ${UNIT_NAME}\n`,
          );
          setExit(ExitCode.agentUnavailable);
          return;
        }
      }
      process.stdout.write(
        `enabled and started ${UNIT_NAME}; for it to run without a login session: loginctl enable-linger ${os.userInfo().username}\n`,
      );
    });
  service
    .command('uninstall')
    .description('stop and disable the unit, then remove it (the environment file stays)')
    .action(() => {
      const { unitFile } = servicePaths();
      const r = systemctl(['disable', '--now', UNIT_NAME]);
      fs.rmSync(unitFile, { force: true });
      const reload = systemctl(['daemon-reload']);
      process.stdout.write(`removed ${unitFile}\n`);
      // The file is gone either way; a manager that did not hear of it may still run the agent.
      for (const [step, result] of [
        [`disable --now ${UNIT_NAME}`, r],
        ['daemon-reload', reload],
      ] as const) {
        if (result.ok) continue;
        process.stderr.write(`quantilica: systemctl --user ${step} failed: ${result.out || `exit ${result.status}`}\n`);
        setExit(ExitCode.agentUnavailable);
      }
    });
  service
    .command('status')
    .description("the unit's file and what systemd says about it")
    .action(() => {
      const { unitFile, envFile } = servicePaths();
      process.stdout.write(
        `unit: ${fs.existsSync(unitFile) ? unitFile : 'not installed'}\nsettings: ${fs.existsSync(envFile) ? envFile : 'none'}\n`,
      );
      const r = systemctl(['status', '--no-pager', UNIT_NAME]);
      process.stdout.write(`${r.out}\n`);
      // The exit of `systemctl is-active`: 0 active, 3 not (an absent unit included).
      const active = systemctl(['is-active', UNIT_NAME]);
      const state = active.stdout.trim().split('\n')[0] ?? '';
      if (active.ok) setExit(ExitCode.ok);
      else if (UNIT_STATES.has(state)) setExit(ExitCode.serviceNotActive);
      else {
        process.stderr.write(
          `quantilica: cannot ask the user's systemd whether ${UNIT_NAME} is active: ${active.out || `exit ${active.status}`}\n`,
        );
        setExit(ExitCode.agentUnavailable);
      }
    });
}
