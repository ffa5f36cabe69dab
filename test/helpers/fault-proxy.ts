// A fault-injecting TCP proxy between ioredis and a real redis-server, for G12 (exactly-once effects).
// It forwards bytes both ways and, when armed, breaks the connection at a chosen point of the RESP
// reply stream:
//   - dropReply(match): the next command whose request bytes contain `match` runs on Redis, and its
//     reply is swallowed and the connection cut, so ioredis reconnects and resends it
//     (autoResendUnfulfilledCommands): the script runs twice;
//   - cutAfterReplies(n): forward n more complete replies, then cut (mid-pipeline: the commands
//     behind them ran on Redis, or not, but their replies are lost and ioredis resends them);
//   - delay(ms, filter): hold replies on connections that sent something matching `filter` back by ms;
//   - partition(): a network partition: bytes either way are discarded (replies held by delay() too),
//     connections stay open, new ones are accepted into the same silence; heal() ends it;
//   - dropReplies(): requests still reach Redis (its scripts run), every reply is discarded;
//   - refuse(): Redis is down: open connections are cut, and the proxy stops listening (connections
//     are refused) until heal();
//   - waitForRequest(match): resolves once a request containing `match` has been forwarded to Redis;
//   - rewriteReplies(from, to): replace `from` by `to` (same length) in replies, e.g. the version INFO
//     reports (the RESP lengths stay right).
// Replies are parsed (RESP2 and RESP3) so that "a reply" is exact, whatever the TCP chunking.
// No vitest import: child processes use it too. Whoever starts a proxy stops it.
import net from 'node:net'
import { Cluster, Redis, type RedisOptions } from 'ioredis'
import type { RedisEndpoint } from './redis-server.js'

/** Length of the first complete RESP2 or RESP3 value in `buf` from `at`, or -1 if it is not complete
 * yet. (ioredis 6 speaks RESP3: maps, sets, nulls, doubles, booleans, big numbers, verbatim strings.) */
export function respLength(buf: Buffer, at = 0): number {
  if (at >= buf.length) return -1
  const lineEnd = buf.indexOf('\r\n', at)
  if (lineEnd < 0) return -1
  const type = String.fromCharCode(buf[at] as number)
  const header = buf.toString('latin1', at + 1, lineEnd)
  const afterLine = lineEnd + 2
  switch (type) {
    case '+':
    case '-':
    case ':':
    case '_':
    case ',':
    case '#':
    case '(':
      return afterLine - at
    case '$':
    case '=':
    case '!': {
      const n = Number(header)
      if (n < 0) return afterLine - at
      return buf.length >= afterLine + n + 2 ? afterLine + n + 2 - at : -1
    }
    case '*':
    case '~':
    case '>':
    case '%': {
      // A map holds a key and a value per entry.
      const n = Number(header) * (type === '%' ? 2 : 1)
      let pos = afterLine
      for (let i = 0; i < n; i++) {
        const len = respLength(buf, pos)
        if (len < 0) return -1
        pos += len
      }
      return pos - at
    }
    default:
      throw new Error(`fault proxy: unexpected RESP type byte ${JSON.stringify(type)}`)
  }
}

type Plan =
  | { kind: 'drop'; match: string; seen: boolean; pair?: Pair; done: () => void }
  | { kind: 'cut'; replies: number; done: () => void }

interface Pair {
  client: net.Socket
  server: net.Socket
  /** Every byte this client sent so far (latin1), to recognise a connection by what it said. */
  said: string
  /** Reply bytes read from Redis and not yet forwarded (or split into replies). */
  pending: Buffer
  delayMs: number
  /** Reply bytes held back (delay()), oldest first, each with when it may go: they leave in this
   * order, and nothing overtakes them (one timer per pair drains the queue; two timers due in the
   * same ms may fire in either order). */
  held: { at: number; bytes: Buffer }[]
}

export interface FaultProxy extends RedisEndpoint {
  /** Connections accepted so far (reconnects add to it). */
  readonly accepted: number
  /** Cut the reply to the next command containing `match` (e.g. a token); resolves once cut. */
  dropReply(match: string): Promise<void>
  /** Forward `n` more whole replies on the next connection to send a command, then cut it. */
  cutAfterReplies(n: number): Promise<void>
  /** Delay replies by `ms` on every connection whose requests so far contain `filter` (all when
   * undefined); 0 turns it off. Applies to connections open now and later. */
  delay(ms: number, filter?: string): void
  /** Discard every byte either way, on open and new connections, until heal(). */
  partition(): void
  /** Forward requests, discard every reply, until heal(). */
  dropReplies(): void
  /** Cut every connection and stop listening (a server that is down), until heal(). */
  refuse(): void
  /** Forward both ways again (bytes discarded meanwhile stay lost), and listen again if refusing. */
  heal(): Promise<void>
  /** Resolves once a request containing `match` has been forwarded to Redis. */
  waitForRequest(match: string): Promise<void>
  /** Replace `from` by `to` (of the same length) in every reply from now on. */
  rewriteReplies(from: string, to: string): void
  /** Forget a plan that has not fired yet. */
  disarm(): void
  /** Cut every open connection (as a network blip would). */
  cutAll(): void
  stop(): Promise<void>
}

/** Start a proxy on 127.0.0.1 (free port) in front of `target`. */
export async function startFaultProxy(target: RedisEndpoint): Promise<FaultProxy> {
  const pairs = new Set<Pair>()
  let plan: Plan | undefined
  let delaySetting: { ms: number; filter: string | undefined } = { ms: 0, filter: undefined }
  let accepted = 0
  let silence: 'none' | 'partition' | 'replies' = 'none'
  let refusing = false
  let rewrite: { from: Buffer; to: Buffer } | undefined
  const watchers = new Set<{ match: string; done: () => void }>()

  const applyDelay = (pair: Pair) => {
    const { ms, filter } = delaySetting
    pair.delayMs = ms > 0 && (filter === undefined || pair.said.includes(filter)) ? ms : 0
  }

  const cut = (pair: Pair) => {
    pair.client.destroy()
    pair.server.destroy()
    pairs.delete(pair)
  }

  const forward = (pair: Pair, input: Buffer) => {
    if (input.length === 0) return
    let bytes = input
    if (rewrite) {
      for (let at = bytes.indexOf(rewrite.from); at >= 0; at = bytes.indexOf(rewrite.from, at + 1)) {
        if (bytes === input) bytes = Buffer.from(input)
        rewrite.to.copy(bytes, at)
      }
    }
    if (pair.delayMs === 0 && pair.held.length === 0) {
      pair.client.write(bytes)
      return
    }
    const at = Math.max(Date.now() + pair.delayMs, pair.held.at(-1)?.at ?? 0)
    pair.held.push({ at, bytes })
    if (pair.held.length === 1) drainLater(pair)
  }

  /** Forward the held replies that are due, in order, then wait for the next one. */
  const drainLater = (pair: Pair) => {
    const head = pair.held[0]
    if (!head) return
    setTimeout(
      () => {
        while (pair.held.length > 0 && (pair.held[0] as { at: number }).at <= Date.now()) {
          const { bytes } = pair.held.shift() as { bytes: Buffer }
          if (!pair.client.destroyed && silence === 'none') pair.client.write(bytes)
        }
        drainLater(pair)
      },
      Math.max(0, head.at - Date.now()),
    )
  }

  const onReply = (pair: Pair, chunk: Buffer) => {
    pair.pending = pair.pending.length > 0 ? Buffer.concat([pair.pending, chunk]) : chunk
    const current = plan
    if (current?.kind === 'drop' && current.seen) {
      // The command ran on Redis (this is its reply, or one before it on a pipelined connection):
      // forward complete replies up to the matched command's, then swallow it and cut.
      plan = undefined
      cut(pair)
      current.done()
      return
    }
    if (current?.kind === 'cut') {
      let pos = 0
      while (current.replies > 0) {
        const len = respLength(pair.pending, pos)
        if (len < 0) break
        pos += len
        current.replies--
      }
      forward(pair, pair.pending.subarray(0, pos))
      pair.pending = pair.pending.subarray(pos)
      if (current.replies === 0) {
        plan = undefined
        cut(pair)
        current.done()
      }
      return
    }
    forward(pair, pair.pending)
    pair.pending = Buffer.alloc(0)
  }

  const server = net.createServer((client) => {
    accepted++
    const upstream = net.connect(target.port, target.host)
    const pair: Pair = {
      client,
      server: upstream,
      said: '',
      pending: Buffer.alloc(0),
      delayMs: 0,
      held: [],
    }
    pairs.add(pair)
    applyDelay(pair)
    client.on('data', (chunk: Buffer) => {
      if (silence === 'partition') return
      const text = chunk.toString('latin1')
      pair.said += text
      if (pair.said.length > 65_536) pair.said = pair.said.slice(-65_536)
      applyDelay(pair)
      if (plan?.kind === 'drop' && !plan.seen && text.includes(plan.match)) {
        plan.seen = true
        plan.pair = pair // only this connection's replies: another's (a Cluster node's, a subscriber's) pass
        // Only replies for commands already sent may pass before the matched one's; simplest and
        // exact for tests that send one command at a time: everything from now on is swallowed.
        if (pair.pending.length > 0) {
          forward(pair, pair.pending)
          pair.pending = Buffer.alloc(0)
        }
      }
      if (plan?.kind === 'cut' && !('pair' in plan)) Object.assign(plan, { pair })
      upstream.write(chunk)
      for (const watcher of watchers) {
        if (!text.includes(watcher.match)) continue
        watchers.delete(watcher)
        watcher.done()
      }
    })
    upstream.on('data', (chunk: Buffer) => {
      if (silence !== 'none') return
      if (plan?.kind === 'drop' && plan.seen && plan.pair === pair) return onReply(pair, chunk)
      if (plan?.kind === 'cut' && (plan as { pair?: Pair }).pair === pair) return onReply(pair, chunk)
      forward(pair, chunk)
    })
    const close = () => cut(pair)
    client.on('error', close)
    upstream.on('error', close)
    client.on('close', close)
    upstream.on('close', close)
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const port = (server.address() as net.AddressInfo).port

  const proxy: FaultProxy = {
    host: '127.0.0.1',
    port,
    get accepted() {
      return accepted
    },
    dropReply(match) {
      return new Promise((done) => {
        plan = { kind: 'drop', match, seen: false, done }
      })
    },
    cutAfterReplies(replies) {
      return new Promise((done) => {
        plan = { kind: 'cut', replies, done }
      })
    },
    delay(ms, filter) {
      delaySetting = { ms, filter }
      for (const pair of pairs) applyDelay(pair)
    },
    partition() {
      silence = 'partition'
    },
    dropReplies() {
      silence = 'replies'
    },
    refuse() {
      refusing = true
      server.close()
      for (const pair of [...pairs]) cut(pair)
    },
    async heal() {
      silence = 'none'
      if (!refusing) return
      refusing = false
      await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve))
    },
    waitForRequest(match) {
      return new Promise((done) => watchers.add({ match, done }))
    },
    rewriteReplies(from, to) {
      if (from.length !== to.length) throw new Error('rewriteReplies: `from` and `to` must have one length')
      rewrite = { from: Buffer.from(from, 'latin1'), to: Buffer.from(to, 'latin1') }
    },
    disarm() {
      plan = undefined
    },
    cutAll() {
      for (const pair of [...pairs]) cut(pair)
    },
    async stop() {
      for (const pair of [...pairs]) cut(pair)
      if (refusing) return
      await new Promise<void>((resolve) => server.close(() => resolve()))
    },
  }
  return proxy
}

/** An ioredis client whose every connection goes through fault proxies: one in front of a standalone
 * server, or one per Cluster master (natMap maps the addresses the nodes announce to the proxies). */
export async function proxiedClient(
  targets: RedisEndpoint[],
  cluster: boolean,
  /** ioredis options for every connection (e.g. autoResendUnfulfilledCommands: false). */
  options: RedisOptions = {},
): Promise<{ client: Redis | Cluster; proxies: FaultProxy[] }> {
  const proxies = await Promise.all(targets.map((target) => startFaultProxy(target)))
  let client: Redis | Cluster
  if (!cluster) {
    const proxy = proxies[0] as FaultProxy
    client = new Redis({ host: proxy.host, port: proxy.port, retryStrategy: () => 20, ...options })
  } else {
    const natMap = Object.fromEntries(
      targets.map((target, i) => [
        `${target.host}:${target.port}`,
        { host: (proxies[i] as FaultProxy).host, port: (proxies[i] as FaultProxy).port },
      ]),
    )
    client = new Cluster(
      proxies.map((proxy) => ({ host: proxy.host, port: proxy.port })),
      { natMap, retryDelayOnFailover: 20, redisOptions: options },
    )
  }
  client.on('error', () => {})
  return { client, proxies }
}
