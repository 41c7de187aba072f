"""The SchedulerProfile controller's I/O shell: the reads a pass gathers (gather.py) and the writes
it sends (act.py), through kubeherd's client. What to read and write is decided in ../core."""
