"""What serve and the device plugin share: logs, events, flags, version, heap and process metrics."""
