"""trigger: the regression detector, and the watcher that starts an improvement cycle when it fires."""
