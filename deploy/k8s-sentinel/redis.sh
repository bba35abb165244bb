#!/bin/sh
# A Redis data node of the station (StatefulSet "redis"): the ACL, then master or replica.
# The master is whoever the Sentinels name; when none answers (the first start) it is redis-0.
# A node that was master and comes back after a failover so starts as the new master's replica.
set -eu
umask 077
# Each user its own password: a Sentinel's or a replica's opens no gateway data.
digest() { printf '%s' "$(cat "$1")" | sha256sum | cut -d' ' -f1; }
{
  printf 'user default off\n'
  printf 'user gateway on #%s ~gw:* &* +@all -@admin -@dangerous\n' \
    "$(digest /run/secrets/station-gateway/redis-password)"
  printf 'user replica on #%s +psync +replconf +ping\n' \
    "$(digest /run/secrets/station-redis/redis-replica-password)"
  printf 'user sentinel on #%s allchannels +multi +slaveof +ping +exec +subscribe +config|rewrite +role +publish +info +client|setname +client|kill +script|kill\n' \
    "$(digest /run/secrets/station-redis/redis-sentinel-password)"
} > /data/users.acl
me="$(hostname).redis"
master=""
for sentinel in redis-sentinel-0 redis-sentinel-1 redis-sentinel-2; do
  if master="$(redis-cli -h "$sentinel.redis-sentinel" -p 26379 --raw \
      SENTINEL get-master-addr-by-name station 2>/dev/null | head -n 1)" && [ -n "$master" ]; then
    break
  fi
done
[ -n "$master" ] || master=redis-0.redis
set -- --dir /data --aclfile /data/users.acl --appendonly yes \
  --masteruser replica --masterauth "$(cat /run/secrets/station-redis/redis-replica-password)" \
  --min-replicas-to-write 1 --min-replicas-max-lag 10 \
  --replica-announce-ip "$me"
if [ "$master" != "$me" ]; then
  set -- "$@" --replicaof "$master" 6379
fi
exec redis-server "$@"
