// Foxglove's own libraries against snapbus, knowing nothing of snapbus: every message is
// decoded by its channel's declared encoding (`json`) alone, images by the fields of
// `foxglove.RawImage`. Prints one JSON line for cli/tests/foxglove.rs to check.
//
//   node check_foxglove.mjs live URL N     the ws-protocol client (@foxglove/ws-protocol) on
//                                          `snapbus foxglove`'s URL: subscribes to every
//                                          channel, until N messages of /demo/step and N images
//   node check_foxglove.mjs mcap FILE      @mcap/core's reader on an MCAP file: every message

import { readFileSync } from 'node:fs';
import wsProtocol from '@foxglove/ws-protocol';
import { McapStreamReader } from '@mcap/core';
import WebSocket from 'ws';

const { FoxgloveClient } = wsProtocol;
const text = new TextDecoder();

// A message as its encoding says: JSON; an image's (base64) bytes as a list of numbers.
function decode(encoding, schemaName, bytes) {
  if (encoding !== 'json') throw new Error(`unexpected message encoding ${encoding}`);
  const m = JSON.parse(text.decode(bytes));
  if (schemaName === 'foxglove.RawImage' || schemaName === 'foxglove.PointCloud') {
    m.data = [...Buffer.from(m.data, 'base64')];
  }
  return m;
}

function channelInfo(c) {
  JSON.parse(c.schema); // the JSON Schema parses
  return { topic: c.topic, encoding: c.encoding, schemaName: c.schemaName, schemaEncoding: c.schemaEncoding };
}

async function live(url, n) {
  const connected = BigInt(Date.now()) * 1_000_000n;
  const client = new FoxgloveClient({ ws: new WebSocket(url, [FoxgloveClient.SUPPORTED_SUBPROTOCOL]) });
  const channels = new Map(); // subscription id → channel
  const out = { channels: [], messages: {}, connected: connected.toString() };
  let serverInfo = null;
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`timed out: ${JSON.stringify(out).slice(0, 2000)}`)), 60_000);
    client.on('error', (e) => { clearTimeout(timer); reject(e); });
    client.on('serverInfo', (info) => { serverInfo = info; });
    client.on('advertise', (list) => {
      for (const c of list) {
        out.channels.push(channelInfo(c));
        channels.set(client.subscribe(c.id), c);
      }
    });
    client.on('message', ({ subscriptionId, timestamp, data }) => {
      const c = channels.get(subscriptionId);
      const bytes = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
      const got = (out.messages[c.topic] ??= []);
      got.push({ t: timestamp.toString(), message: decode(c.encoding, c.schemaName, bytes) });
      const steps = out.messages['/demo/step']?.length ?? 0;
      const images = out.messages['/demo/step/observation']?.length ?? 0;
      if (steps >= n && images >= n) { clearTimeout(timer); resolve(); }
    });
  });
  client.close();
  out.serverInfo = serverInfo;
  return out;
}

function mcap(file) {
  const reader = new McapStreamReader();
  reader.append(readFileSync(file));
  const schemas = new Map(), channels = new Map();
  const out = { channels: [], messages: {} };
  for (let r; (r = reader.nextRecord()); ) {
    if (r.type === 'Schema') schemas.set(r.id, r);
    else if (r.type === 'Channel') {
      const s = schemas.get(r.schemaId);
      const c = {
        topic: r.topic, encoding: r.messageEncoding, schemaName: s.name, schemaEncoding: s.encoding,
        schema: text.decode(s.data),
      };
      channels.set(r.id, c);
      out.channels.push(channelInfo(c));
    } else if (r.type === 'Message') {
      const c = channels.get(r.channelId);
      (out.messages[c.topic] ??= []).push({
        t: r.logTime.toString(),
        message: decode(c.encoding, c.schemaName, r.data),
      });
    }
  }
  if (!reader.done()) throw new Error('the file ends in the middle of a record');
  return out;
}

const [mode, arg, n] = process.argv.slice(2);
const result = mode === 'live' ? await live(arg, Number(n)) : mcap(arg);
process.stdout.write(JSON.stringify(result) + '\n');
process.exit(0);
