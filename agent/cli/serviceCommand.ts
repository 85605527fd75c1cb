import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import type { Command } from 'commander';
import { ClientError } from '../errors';
import { ExitCode } from '../exitCodes';

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
  const quote = (s: string) => (/^[A-Za-z0-9_@%+=:,./-]+$/.test(s) ? s : `"${s.replace(/(["\\])/g, '\\$1')}"`);
  return `[Unit]
Description=Quantilica collection orchestrator agent (pools, disk gate, schedule, telemetry)
Documentation=https://github.com/quantilica
After=network-online.target

[Service]
Type=simple
ExecStart=${quote(nodePath)} ${quote(agentJs)} agent
# Settings (QUANTILICA_*, CRON_*, DATA_DIR, QUANTILICA_DATABASE_URL); "-": the file may be absent.
EnvironmentFile=-${envFile}
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

const ENV_TEMPLATE = `# Environment of the Quantilica agent (systemd user unit ${UNIT_NAME}).
# One NAME=value per line; restart the agent after a change: systemctl --user restart quantilica-agent
#CRON_USE_POOLS=true
#DATA_DIR=/data
#QUANTILICA_CATALOG=/etc/quantilica/catalog.json
#QUANTILICA_DATABASE_URL=postgres://user@localhost/quantilica
`;

function systemctl(args: string[]): { ok: boolean; out: string } {
  const r = spawnSync('systemctl', ['--user', ...args], { encoding: 'utf8' });
  return { ok: r.status === 0, out: `${r.stdout ?? ''}${r.stderr ?? ''}${r.error ? r.error.message : ''}`.trim() };
}

/** `quantilica service install|uninstall|status`. */
export function registerServiceCommand(program: Command, setExit: (code: number) => void): void {
  const service = program.command('service').description(`run the agent as a systemd user service (${UNIT_NAME})`);
  service.command('install')
    .description('write the unit and the environment file, then enable and start it')
    .option('--no-enable', 'only write the files')
    .action((opts: { enable: boolean }) => {
      const { unitFile, envFile } = servicePaths();
      const agentJs = path.resolve(process.argv[1] ?? '');
      if (!fs.existsSync(agentJs)) throw new ClientError(0, ExitCode.usage, `cannot find the agent script (${agentJs})`);
      fs.mkdirSync(path.dirname(unitFile), { recursive: true, mode: 0o700 });
      fs.mkdirSync(path.dirname(envFile), { recursive: true, mode: 0o700 });
      fs.writeFileSync(unitFile, unitText(process.execPath, agentJs, envFile), { mode: 0o600 });
      fs.chmodSync(unitFile, 0o600);
      if (!fs.existsSync(envFile)) fs.writeFileSync(envFile, ENV_TEMPLATE, { mode: 0o600, flag: 'wx' });
      process.stdout.write(`wrote ${unitFile}\nsettings: ${envFile}\n`);
      if (!opts.enable) return;
      const steps = [['daemon-reload'], ['enable', '--now', UNIT_NAME]];
      for (const step of steps) {
        const r = systemctl(step);
        if (!r.ok) {
          process.stderr.write(`systemctl --user ${step.join(' ')} failed: ${r.out}\nThe unit is written; enable it where a user manager runs: systemctl --user enable --now ${UNIT_NAME}\n`);
          setExit(ExitCode.agentUnavailable);
          return;
        }
      }
      process.stdout.write(`enabled and started ${UNIT_NAME}; for it to run without a login session: loginctl enable-linger ${os.userInfo().username}\n`);
    });
  service.command('uninstall')
    .description('stop and disable the unit, then remove it (the environment file stays)')
    .action(() => {
      const { unitFile } = servicePaths();
      const r = systemctl(['disable', '--now', UNIT_NAME]);
      if (!r.ok) process.stderr.write(`systemctl --user disable --now ${UNIT_NAME}: ${r.out}\n`);
      fs.rmSync(unitFile, { force: true });
      systemctl(['daemon-reload']);
      process.stdout.write(`removed ${unitFile}\n`);
    });
  service.command('status')
    .description("the unit's file and what systemd says about it")
    .action(() => {
      const { unitFile, envFile } = servicePaths();
      process.stdout.write(`unit: ${fs.existsSync(unitFile) ? unitFile : 'not installed'}\nsettings: ${fs.existsSync(envFile) ? envFile : 'none'}\n`);
      const r = systemctl(['status', '--no-pager', UNIT_NAME]);
      process.stdout.write(`${r.out}\n`);
      setExit(fs.existsSync(unitFile) ? ExitCode.ok : ExitCode.unknownName);
    });
}
