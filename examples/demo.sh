#!/usr/bin/env bash
# The main job, on a throw-away root: builds mesh-host, lays out a machine "in use" (a file the
# predecessor wrote), adopts it, shows what was held, catches the predecessor writing again, and
# prints the briefing. Nothing outside the temporary root is touched.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked
bin=target/release/mesh-host
root=$(mktemp -d /tmp/mesh-host-demo.XXXXXX)
mkdir -p "$root/etc/app"
echo "written by the predecessor" > "$root/etc/app/app.conf"
echo "== apply (adopted): the predecessor's file is held, the rest is created"
"$bin" --root "$root" apply examples/adopted-node.json
echo "== the predecessor writes its file again; reconcile reports it and does not revert it"
echo "written again by the predecessor" > "$root/etc/app/app.conf"
"$bin" --root "$root" reconcile || true
echo "== owned"
"$bin" --root "$root" owned
echo "== briefing"
"$bin" --root "$root" briefing
echo "(root left at $root)"
