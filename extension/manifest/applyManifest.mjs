// Writes the extension's keys into package.json and leaves every other key as it is (the lead edits
// the rest of the file concurrently). Run: node extension/manifest/applyManifest.mjs
import * as fs from 'node:fs';
import * as path from 'node:path';

const root = path.resolve(import.meta.dirname, '..', '..');
const file = path.join(root, 'package.json');
const pkg = JSON.parse(fs.readFileSync(file, 'utf8'));
const contributes = JSON.parse(fs.readFileSync(path.join(import.meta.dirname, 'contributes.json'), 'utf8'));

pkg.main = './dist/extension.js';
pkg.icon = 'media/icon.png';
pkg.categories = ['Data Science', 'Other'];
// Runs where the workspace (and the agent) is; never "ui", which would put it on the wrong machine.
pkg.extensionKind = ['workspace'];
pkg.galleryBanner = { color: '#16324f', theme: 'dark' };
pkg.activationEvents = ['onStartupFinished'];
// The extension starts and commands an agent that runs programs: never on behalf of an untrusted folder.
pkg.capabilities = {
  untrustedWorkspaces: {
    supported: false,
    description: 'The extension starts and controls the Quantilica agent, which runs fetcher programs on this machine; it reads nothing from the workspace, but it must not act on behalf of an untrusted folder.',
  },
  virtualWorkspaces: false,
};
pkg.contributes = contributes;
pkg.scripts = { ...pkg.scripts, package: 'node extension/packageVsix.mjs', 'test:extension': 'node test/extension/runOffline.mjs' };

fs.writeFileSync(file, `${JSON.stringify(pkg, null, 2)}\n`);
