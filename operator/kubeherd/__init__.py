"""kubeherd: a Kopf operator for CustomDaemonSets and SchedulerProfiles."""

__version__ = "0.1.0"
