#!/bin/sh
# A Sentinel of the station (StatefulSet "redis-sentinel"). Sentinel rewrites its configuration:
# written at every start into the pod's own /data, monitoring "station" (quorum 2 of 3) at the
# master another Sentinel names, or at redis-0 when none answers (the first start).
set -eu
umask 077
password="$(cat /run/secrets/station-redis/redis-sentinel-password)"
master=""
for sentinel in redis-sentinel-0 redis-sentinel-1 redis-sentinel-2; do
  [ "$sentinel" != "$(hostname)" ] || continue
  if master="$(redis-cli -h "$sentinel.redis-sentinel" -p 26379 --raw \
      SENTINEL get-master-addr-by-name station 2>/dev/null | head -n 1)" && [ -n "$master" ]; then
    break
  fi
done
[ -n "$master" ] || master=redis-0.redis
{
  printf 'port 26379\ndir /data\n'
  printf 'sentinel resolve-hostnames yes\nsentinel announce-hostnames yes\n'
  printf 'sentinel announce-ip %s\n' "$(hostname).redis-sentinel"
  printf 'sentinel monitor station %s 6379 2\n' "$master"
  printf 'sentinel auth-user station sentinel\nsentinel auth-pass station %s\n' "$password"
  printf 'sentinel down-after-milliseconds station 5000\n'
  printf 'sentinel failover-timeout station 60000\n'
  printf 'sentinel parallel-syncs station 1\n'
} > /data/sentinel.conf
exec redis-server /data/sentinel.conf --sentinel
