"""``gateway demo``: the whole station on one machine, with nothing to install.

A gateway with job management, the SFC engine and the MES publisher, the simulated station
(positioning unit, tightening controller, camera QA) as its equipment, and a simulated MES that
configures the station, stores and starts jobs with the rear-axle recipe, follows them live and
finally reads every result the way an MES does (retained topics) and clears the jobs.
"""
