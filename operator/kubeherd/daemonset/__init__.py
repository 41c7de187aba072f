"""CustomDaemonSets: one daemon pod on every eligible node, as the native DaemonSet controller."""
