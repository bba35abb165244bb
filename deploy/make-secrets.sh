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

# The broker's TLS listener (8883, the one the plant network reaches): a CA of the station's own
# and a server certificate it signed for the names clients use (mosquitto inside compose,
# localhost, and MQTT_TLS_NAMES, e.g. "DNS:broker.plant.example,IP:10.0.0.5"). Clients trust
# secrets/mqtt_tls_ca.pem (mqtt.tls_ca_file). Delete the four files to make new ones.
if [ ! -s secrets/mqtt_tls_server.pem ]; then
    command -v openssl >/dev/null || { echo "openssl is needed for the broker's certificate" >&2; exit 1; }
    names="DNS:mosquitto,DNS:localhost,IP:127.0.0.1${MQTT_TLS_NAMES:+,$MQTT_TLS_NAMES}"
    key="-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
    # shellcheck disable=SC2086
    openssl req -x509 $key -keyout secrets/mqtt_tls_ca.key -out secrets/mqtt_tls_ca.pem \
        -days 3650 -subj "/CN=station gateway broker CA" \
        -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign \
        2>/dev/null
    # shellcheck disable=SC2086
    openssl req $key -keyout secrets/mqtt_tls_server.key -out secrets/mqtt_tls_server.csr \
        -subj "/CN=mosquitto" 2>/dev/null
    printf 'basicConstraints=critical,CA:FALSE\nextendedKeyUsage=serverAuth\nsubjectAltName=%s\n' \
        "$names" > secrets/mqtt_tls_server.ext
    openssl x509 -req -in secrets/mqtt_tls_server.csr -CA secrets/mqtt_tls_ca.pem \
        -CAkey secrets/mqtt_tls_ca.key -CAcreateserial -days 825 \
        -extfile secrets/mqtt_tls_server.ext -out secrets/mqtt_tls_server.pem 2>/dev/null
    rm -f secrets/mqtt_tls_server.csr secrets/mqtt_tls_server.ext secrets/mqtt_tls_ca.srl
    chmod 0400 secrets/mqtt_tls_ca.key
    echo "made secrets/mqtt_tls_ca.pem and the broker's certificate for $names"
fi

# Compose bind-mounts these files as they are, and the gateway runs as uid 10001: the files are
# readable by everyone, the directory (0700) by you only.
chmod 0444 secrets/mqtt_password secrets/mqtt_mes_password secrets/mqtt_device_passwords \
    secrets/redis_password secrets/redis_replica_password secrets/redis_sentinel_password \
    secrets/mqtt_tls_ca.pem secrets/mqtt_tls_server.pem secrets/mqtt_tls_server.key
