"""decode: OTLP request bodies (protobuf or JSON) into the store's columns: the Python reference and the native
decoders."""
