#!/usr/bin/env bash
# The main job, on a throw-away root: builds mesh-host, lays out a machine "in use" (a file the
# predecessor wrote), adopts it, shows what was held, catches the predecessor writing again, and
# prints the briefing. Nothing outside the temporary root is touched: each run of the host gets a
# network namespace of its own (`unshare --net`, so run this as root), because an adopted node's
# apply loads the guard into nf_tables and a demo has no business in this machine's firewall.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked
bin="${CARGO_TARGET_DIR:-target}/release/mesh-host"
host() { unshare --net -- "$bin" --root "$root" "$@"; }
root=$(mktemp -d /tmp/mesh-host-demo.XXXXXX)
mkdir -p "$root/etc/app"
echo "written by the predecessor" > "$root/etc/app/app.conf"
echo "== apply (adopted): the predecessor's file is held, the rest is created, the guard loaded"
host apply examples/adopted-node.json
echo
echo "== the predecessor writes its file again; reconcile reports it and does not revert it"
echo "written again by the predecessor" > "$root/etc/app/app.conf"
host reconcile
echo
echo "== owned"
host owned
echo
echo "== briefing"
host briefing
echo
echo "== a declaration with an unknown field and a relative path is refused whole (exit 2)"
printf '%s\n' '{"version": 1, "node": "workstation", "mode": "adopted", "colour": "blue",' \
  ' "resources": [{"id": "x", "type": "file", "path": "etc/x", "content": ""}]}' > "$root/bad.json"
host apply "$root/bad.json" || echo "(exit $?)"
echo
echo "(root left at $root)"
