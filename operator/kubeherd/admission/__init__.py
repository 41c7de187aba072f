"""The validating admission webhook: bad CustomDaemonSets and SchedulerProfiles refused at
`kubectl apply`, with the verdict the controllers would give later. Served by every replica of
the operator; `failurePolicy: Ignore`, so an operator that is down never blocks anyone."""
