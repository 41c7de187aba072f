"""Extra kube-schedulers: configuration, validation and the objects that run them."""
