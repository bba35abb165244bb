"""The operator's view: a read-only web UI with live SFC charts, and the per-job trace.

``trace`` records what happens to each job (steps, commands, replies, events, methods) from the
gateway's observer hooks into Redis; ``app`` serves the pages at ``/ui`` and the JSON at
``/api`` on the HTTP endpoint, updated live through Server-Sent Events.
"""
