"""receive: the servers a span enters by: OTLP/HTTP (with its ASGI layers and guards) and OTLP/gRPC."""
