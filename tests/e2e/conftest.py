"""End to end: the whole pattern in one process (the root ``harness`` fixture, ``devtools.harness``) on
the session's Azurite: real HTTP starter body, real orchestrators through the SDK's replay on a virtual
clock, real agent bodies pumping real queues, the real watchdog every 30 s of virtual time."""
