#!/bin/sh
# Makes Mosquitto's password file from the secrets (salted hashes, mosquitto_passwd -b).
# deploy/compose.yaml runs it at every start of the broker, on a tmpfs; the tests run it too.
#
#   passwd.sh <secrets directory> <password file>
#
# Users (deploy/mosquitto/acl says what each may do):
#   gateway      secret mqtt_password
#   mes          secret mqtt_mes_password
#   <equipment>  secret mqtt_device_passwords: "name=password,name=password,..." (one user per
#                piece of equipment, named like it; the simulator reads the same secret)
set -eu
secrets=$1
passwd=$2
tool=${MOSQUITTO_PASSWD:-mosquitto_passwd}

umask 077
"$tool" -c -b "$passwd" gateway "$(cat "$secrets/mqtt_password")"
"$tool" -b "$passwd" mes "$(cat "$secrets/mqtt_mes_password")"
entries=$(cat "$secrets/mqtt_device_passwords")
IFS=','
for entry in $entries; do
    name=${entry%%=*}
    password=${entry#*=}
    case "$name" in
        gateway | mes | "" | *[!A-Za-z0-9_.-]*)
            echo "mqtt_device_passwords: '$name' cannot be an equipment user" >&2
            exit 1
            ;;
    esac
    if [ -z "$password" ] || [ "$password" = "$entry" ]; then
        echo "mqtt_device_passwords: no password for '$name'" >&2
        exit 1
    fi
    "$tool" -b "$passwd" "$name" "$password"
done
