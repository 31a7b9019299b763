#!/bin/sh
# Start `autoresearch work` on the first GPU of this container that no other worker holds.
#
# `docker compose up --scale worker=N` starts N identical containers, and Docker gives every one
# the same GPUs (a `count: 1` reservation hands each replica GPU 0). So each worker container
# sees all of the host's GPUs and claims one here: it takes an exclusive flock on
# DATA_DIR/gpu-slots/gpuI.lock, shared by the workers of this host through their common volume,
# and keeps it for its whole life (the lock lives on file descriptor 9, inherited by the worker;
# the kernel drops it when the worker exits, however it exits). The slot also names the
# worker's state folder, so a recreated container finds the results its predecessor spooled.
set -eu

data_dir="${DATA_DIR:-data}"
slots="$data_dir/gpu-slots"
mkdir -p "$slots"

count=0
for node in /dev/nvidia[0-9]*; do
    if [ -e "$node" ]; then
        count=$((count + 1))
    fi
done
if [ "$count" -eq 0 ]; then
    echo "autoresearch gpu-worker: no GPU is visible in this container (no /dev/nvidia0)." >&2
    echo "  Install the NVIDIA Container Toolkit on this host and keep the worker's GPU reservation" >&2
    echo "  (docs/operations.md, \"Docker compose\"). CPU workers: \`autoresearch work --cpu\`." >&2
    exit 1
fi

i=0
while [ "$i" -lt "$count" ]; do
    exec 9>"$slots/gpu$i.lock"
    if flock -n 9; then
        echo "autoresearch gpu-worker: GPU $i of $count is this worker's" >&2
        exec autoresearch work --gpu "$i" --state-dir "$data_dir/workers/gpu$i" "$@"
    fi
    exec 9>&-
    i=$((i + 1))
done
echo "autoresearch gpu-worker: all $count GPUs of this host already have a worker;" >&2
echo "  scale the worker service to at most $count (docker compose up --scale worker=$count)." >&2
exit 1
