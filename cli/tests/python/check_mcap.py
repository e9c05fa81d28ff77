#!/usr/bin/env python3
"""Reads an MCAP file with the Python `mcap` package and prints what it holds as JSON.

Usage: check_mcap.py FILE [--stream]

With --stream the file is read as a non-seekable stream (the package's NonSeekingReader),
which is also what `make_reader` falls back to for a file without a summary. Prints:

    {"messages": n, "topics": {topic: n}, "schemas": n, "channels": n,
     "schema_encodings": [...], "message_encodings": [...],
     "json_messages": n, "json_schemas": n, "first": {topic: first JSON message},
     "summary": {"schemas": n, "channels": n, "messages": n} or null}

Schemas and channels are those that messages use. `json_messages` / `json_schemas` count the
messages with encoding `json` / schemas with encoding `jsonschema` whose bytes parse as JSON
(a message or schema that does not parse is an error).
"""

import json
import sys

from mcap.reader import make_reader


class Unseekable:
    """A file object that says it cannot seek, so `make_reader` streams it."""

    def __init__(self, f):
        self._f = f

    def read(self, n=-1):
        return self._f.read(n)

    def seekable(self):
        return False


def main():
    path = sys.argv[1]
    stream = "--stream" in sys.argv[2:]
    schemas = {}
    channels = {}
    topics = {}
    first = {}
    json_messages = 0
    json_schemas = set()
    with open(path, "rb") as f:
        reader = make_reader(Unseekable(f) if stream else f, validate_crcs=True)
        for schema, channel, message in reader.iter_messages():
            if schema is not None and schema.id not in schemas:
                schemas[schema.id] = schema.encoding
                if schema.encoding == "jsonschema":
                    json.loads(schema.data)
                    json_schemas.add(schema.id)
            channels[channel.id] = channel.message_encoding
            topics[channel.topic] = topics.get(channel.topic, 0) + 1
            if channel.message_encoding == "json":
                value = json.loads(message.data)
                json_messages += 1
                first.setdefault(channel.topic, value)
        summary = None
        if not stream:
            s = reader.get_summary()
            if s is not None:
                summary = {
                    "schemas": len(s.schemas),
                    "channels": len(s.channels),
                    "messages": s.statistics.message_count if s.statistics else None,
                }
    print(
        json.dumps(
            {
                "messages": sum(topics.values()),
                "topics": topics,
                "schemas": len(schemas),
                "channels": len(channels),
                "schema_encodings": sorted(set(schemas.values())),
                "message_encodings": sorted(set(channels.values())),
                "json_messages": json_messages,
                "json_schemas": len(json_schemas),
                "first": first,
                "summary": summary,
            }
        )
    )


if __name__ == "__main__":
    main()
