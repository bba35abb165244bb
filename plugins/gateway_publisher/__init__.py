"""The MES publisher: job state as retained MQTT topics, so an MES that was offline loses nothing.

Per scope, on ``{prefix}/{scope}/...``, retained, QoS 1, with MQTT v5 message expiry:

- ``state-index``: every job still in the station with its state and whether its result is
  published, plus a per-scope monotonic ``seq`` and the publisher's ``epoch``;
- ``order/{job_order_id}``: the job order (Store, StoreAndStart, Update);
- ``result/{job_order_id}``: the final Job Response (Ended, Aborted, and results recorded after);
- both deleted (zero-byte retained) on Clear and Cancel.

It reads the scopes' change records (``gateway.changes``). Modules: ``index`` (the in-memory
state index), ``batch`` (what a run of records does), ``documents`` (order/result payloads),
``persistence`` (cursor, seq and index in the store), ``lease`` (one active publisher),
``topics`` (topic names, CloudEvents), ``service`` (the loop), ``settings``, ``plugin`` (the
hooks).
"""
