"""Northbound OPC UA: OPC 40001-3 job management served as an OPC UA server (asyncua).

Each served scope is a MachineryItem under Machines with its JobManagement add-in; every method
call goes through ``gateway.job_methods``, the job control the MQTT path uses, and every status
event of the store's change streams becomes an ``ISA95JobOrderStatusEventType`` event.
"""
