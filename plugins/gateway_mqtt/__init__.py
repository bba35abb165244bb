"""MQTT v5 binding (aiomqtt): CloudEvents in binary mode, shared subscriptions, sessions."""
