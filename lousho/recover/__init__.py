"""recover: durable runs, checkpoint stores and the recover() loop."""
