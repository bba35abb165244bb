"""Equipment for the gateway's MQTT driver: answers each command, sends heartbeats (paho-mqtt 2).

python3 press.py [mqtt://localhost:1883] [press]   (the gateway: mqtt_equipment.equipment=press)
"""

import json
import sys
import threading
import time
import uuid
from urllib.parse import urlparse

import paho.mqtt.client as mqtt
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

url = urlparse(sys.argv[1] if len(sys.argv) > 1 else "mqtt://localhost:1883")
name = sys.argv[2] if len(sys.argv) > 2 else "press"
topics = f"equipment/{name}"  # mqtt_equipment.topic_prefix / equipment name


def cloudevent(type_: str) -> Properties:
    """CloudEvent attributes as MQTT v5 user properties (binary mode: the payload is data)."""
    properties = Properties(PacketTypes.PUBLISH)
    properties.UserProperty = [
        ("specversion", "1.0"),
        ("id", str(uuid.uuid4())),
        ("source", f"urn:equipment:{name}"),
        ("type", type_),
        ("equipment", name),
    ]
    properties.ContentType = "application/json"
    return properties


def on_message(client, userdata, message):  # a command: do the work, answer its Response Topic
    command = dict(message.properties.UserProperty)
    print("command", command["type"], command["correlationid"], message.payload.decode())
    reply = cloudevent(command["type"])
    reply.CorrelationData = message.properties.CorrelationData  # pairs the reply with it
    result = {"pressed": True, "force_kn": 12.5}  # error: add ("errorcode", "...") to UserProperty
    client.publish(message.properties.ResponseTopic, json.dumps(result), 1, properties=reply)


subscribed = threading.Event()  # alive only once it can take commands
client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=name, protocol=mqtt.MQTTv5)
client.on_message = on_message
client.on_connect = lambda client, *_: client.subscribe(f"{topics}/commands", qos=1)
client.on_subscribe = lambda *_: subscribed.set()
client.connect(url.hostname, url.port or 1883)
client.loop_start()
subscribed.wait()
while True:  # alive: offline after mqtt_equipment.heartbeat_timeout_seconds without a heartbeat
    heartbeat = cloudevent("io.github.station-gateway.equipment.heartbeat.v1")
    client.publish(f"{topics}/heartbeat", "{}", 0, properties=heartbeat)
    time.sleep(2)
