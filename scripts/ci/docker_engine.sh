#!/usr/bin/env bash
# Install (if missing) and start (if not answering) a Docker engine without systemd, then wait for its
# socket. Idempotent: a second run with the engine up only checks it (~0.1 s). Needs root.
# Facts behind each step: shared/reference/docker-engine-in-ci.md (stale pid files after a SIGKILL block a
# restart; dockerd needs no special flags here).
set -euo pipefail

SOCK=/var/run/docker.sock
LOG=${DOCKERD_LOG:-/var/log/dockerd.log}
WAIT_S=${DOCKERD_WAIT_S:-60}
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
elapsed() { local d=$(( $(now_ms) - $1 )); printf '%d.%02d' $(( d / 1000 )) $(( d % 1000 / 10 )); }
t0=$(now_ms)

# A SIGKILLed process can linger here as a zombie (nothing reaps it): `kill -0` would call it alive.
alive() { [[ -r /proc/$1/stat ]] && [[ $(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) != Z ]]; }

engine_up() { docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }

if engine_up; then
  echo "docker_engine: already up (server $(docker version --format '{{.Server.Version}}')) in $(elapsed "$t0")s"
  exit 0
fi

if ! command -v dockerd >/dev/null 2>&1; then
  t=$(now_ms)
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends docker.io >/dev/null
  echo "docker_engine: installed docker.io in $(elapsed "$t")s"
fi

t=$(now_ms)
# A dockerd/containerd that was SIGKILLed leaves pid files that make the next start fail; only remove
# them when the process they name is gone.
for pidfile in /var/run/docker.pid /var/run/docker/containerd/containerd.pid /run/containerd/containerd.pid; do
  if [[ -f $pidfile ]]; then
    pid=$(cat "$pidfile" 2>/dev/null || true)
    if [[ -z $pid ]] || ! alive "$pid"; then
      rm -f "$pidfile"
      echo "docker_engine: removed stale $pidfile"
    fi
  fi
done

dockerd_pid=$(cat /var/run/docker.pid 2>/dev/null || true)
if [[ -z $dockerd_pid ]] || ! alive "$dockerd_pid"; then
  mkdir -p "$(dirname "$LOG")"
  setsid dockerd --host "unix://$SOCK" >>"$LOG" 2>&1 </dev/null &
  disown || true
fi

deadline=$(( $(date +%s) + WAIT_S ))
until engine_up; do
  if (( $(date +%s) > deadline )); then
    echo "docker_engine: engine did not answer on $SOCK within ${WAIT_S}s; last log lines:" >&2
    tail -n 30 "$LOG" >&2 || true
    exit 1
  fi
  sleep 0.2
done
echo "docker_engine: engine up (server $(docker version --format '{{.Server.Version}}')) in $(elapsed "$t")s; total $(elapsed "$t0")s"
