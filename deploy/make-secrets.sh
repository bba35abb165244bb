#!/bin/sh
# Makes the secret files deploy/compose.yaml reads (deploy/secrets/*), each once: an existing
# file is kept, so running this again changes nothing. Delete a file and run it again to rotate
# that secret (then `docker compose up -d --force-recreate`).
set -eu
cd "$(dirname "$0")"

umask 077
mkdir -p secrets
chmod 0700 secrets

random_password() {
    # 32 hex characters: nothing that needs escaping in a URL, a shell or a config file.
    od -An -N16 -tx1 /dev/urandom | tr -d ' \n'
}

make_secret() {  # name
    if [ ! -s "secrets/$1" ]; then
        random_password > "secrets/$1"
        echo >> "secrets/$1"
        echo "made secrets/$1"
    fi
}

make_secret mqtt_password            # user "gateway": every gateway process
make_secret mqtt_mes_password        # user "mes": the MES
make_secret redis_password           # ACL user "gateway"
make_secret redis_replica_password   # ACL user "replica" (deploy/sentinel: replicas of the master)
make_secret redis_sentinel_password  # ACL user "sentinel" (deploy/sentinel: the Sentinels)

# One MQTT user per simulated device, named like it ("name=password,..."): the broker's ACL
# lets each publish under its own topics only. Real equipment gets a user of its own the same way.
if [ ! -s secrets/mqtt_device_passwords ]; then
    printf 'positioner=%s,tightener=%s,camera=%s\n' \
        "$(random_password)" "$(random_password)" "$(random_password)" \
        > secrets/mqtt_device_passwords
    echo "made secrets/mqtt_device_passwords"
fi

# Compose bind-mounts these files as they are, and the gateway runs as uid 10001: the files are
# readable by everyone, the directory (0700) by you only.
chmod 0444 secrets/mqtt_password secrets/mqtt_mes_password secrets/mqtt_device_passwords \
    secrets/redis_password secrets/redis_replica_password secrets/redis_sentinel_password
