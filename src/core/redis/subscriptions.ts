// The Redis store's wake-up channels: one subscriber connection (a duplicate of the store's client),
// every channel a wait group listens to, and an honest answer to "will a grant published now reach
// us?".
//
// A channel counts as subscribed only once Redis confirmed its SUBSCRIBE on the connection as it is
// now: add() resolves then, and not before (a wait group re-checks with backoff until it does, so a
// grant published meanwhile is found by a re-check, never lost). Three rules make that true:
// - SUBSCRIBE is only written while the connection is ready. ioredis 5 writes a SUBSCRIBE issued
//   between its TCP connect and its ready check straight to the socket (the command may run while
//   Redis loads); the connection is then in subscriber mode, the ready check's INFO is refused, and
//   ioredis reconnects without the channel (redis/ioredis#2037, fixed in ioredis 6). The SUBSCRIBE
//   had been confirmed, so every grant of that channel was lost while the store reported itself
//   healthy: a waiter slept until its heartbeat (waiterTtlMs / 3).
// - One SUBSCRIBE in flight at a time, for every channel not yet confirmed (one command for a burst of
//   new names), retried with backoff when it fails and at every 'ready'.
// - A connection that closes loses every subscription: each is confirmed again after the reconnect
//   (ioredis resubscribes on its own too; a second SUBSCRIBE of a channel changes nothing), and
//   `healthy` stays false until they are, so waiters re-check meanwhile.
import { debuglog } from 'node:util'
import type { Client, Subscriber } from './client.js'
import { within } from '../timeout.js'

const debug = debuglog('tollgate:store')

/** Most channels in one SUBSCRIBE. */
const MAX_CHANNELS_PER_CALL = 1000
const RETRY_MIN_MS = 50
const RETRY_MAX_MS = 2000

interface Channel {
  confirmed: boolean
  /** add() calls waiting for the confirmation. */
  waiting: (() => void)[]
}

export class Subscriptions {
  private connection: Subscriber | undefined
  private readonly channels = new Map<string, Channel>()
  /** A SUBSCRIBE is in flight. */
  private busy = false
  private retryMs = RETRY_MIN_MS
  private retry: NodeJS.Timeout | undefined
  /** The connection closed while channels were subscribed, and they are not all confirmed again. */
  private recovering = false
  private closed = false

  constructor(
    /** The store's client (asked only once it is made: the store subscribes then). */
    private readonly source: () => Client,
    private readonly timeoutMs: number,
    private readonly deliver: (channel: string, message: string) => void,
  ) {}

  /** True while a grant published now reaches every channel subscribed so far. */
  get healthy(): boolean {
    return this.connection?.status === 'ready' && !this.recovering
  }

  /** Listen to `channel`; resolves once Redis confirmed the subscription (or the store closed). */
  add(channel: string): Promise<void> {
    if (this.closed) return Promise.resolve()
    let entry = this.channels.get(channel)
    if (entry?.confirmed) return Promise.resolve()
    if (!entry) {
      entry = { confirmed: false, waiting: [] }
      this.channels.set(channel, entry)
    }
    const pending = entry
    const confirmed = new Promise<void>((resolve) => pending.waiting.push(resolve))
    this.ensureConnection()
    this.pump()
    return confirmed
  }

  /** Stop listening to `channel`. */
  remove(channel: string): void {
    const entry = this.channels.get(channel)
    if (!entry) return
    this.channels.delete(channel)
    for (const resolve of entry.waiting.splice(0)) resolve()
    if (entry.confirmed) this.unsubscribe([channel])
  }

  async close(): Promise<void> {
    this.closed = true
    clearTimeout(this.retry)
    for (const entry of this.channels.values()) for (const resolve of entry.waiting.splice(0)) resolve()
    this.channels.clear()
    const connection = this.connection
    this.connection = undefined
    if (!connection) return
    const done = await within(connection.quit(), 1000)
    if (!done.ok) connection.disconnect()
  }

  private ensureConnection(): void {
    if (this.connection) return
    const connection = this.source().duplicate()
    connection.on('error', (error: Error) => debug('subscriber error: %s', error.message))
    connection.on('message', (channel: string, message: string) => this.deliver(channel, message))
    connection.on('ready', () => {
      this.retryMs = RETRY_MIN_MS
      this.pump()
    })
    connection.on('close', () => {
      let lost = false
      for (const entry of this.channels.values()) {
        lost ||= entry.confirmed
        entry.confirmed = false
      }
      if (lost) this.recovering = true
    })
    this.connection = connection
    // A duplicate keeps its source's options: with lazyConnect it would wait for a first command,
    // and SUBSCRIBE is only sent once it is ready.
    if (connection.status === 'wait') connection.connect().catch(() => {})
  }

  /** Send one SUBSCRIBE for the channels not confirmed yet, if none is in flight and the connection
   * is ready (else the next 'ready' or the retry timer sends it). */
  private pump(): void {
    const connection = this.connection
    if (this.busy || this.closed || connection?.status !== 'ready') return
    const batch: string[] = []
    for (const [channel, entry] of this.channels) {
      if (entry.confirmed) continue
      batch.push(channel)
      if (batch.length === MAX_CHANNELS_PER_CALL) break
    }
    if (batch.length === 0) {
      this.recovering = false
      return
    }
    this.busy = true
    void within(connection.subscribe(...batch), this.timeoutMs).then((done) => {
      this.busy = false
      if (this.closed) return
      if (!done.ok || this.connection !== connection || connection.status !== 'ready') {
        if (!done.ok) debug('subscribe of %d channels failed: %o', batch.length, done.error)
        this.retryLater()
        return
      }
      this.retryMs = RETRY_MIN_MS
      const dropped: string[] = []
      for (const channel of batch) {
        const entry = this.channels.get(channel)
        if (!entry) {
          dropped.push(channel) // removed while its SUBSCRIBE was on the way
          continue
        }
        entry.confirmed = true
        for (const resolve of entry.waiting.splice(0)) resolve()
      }
      if (dropped.length > 0) this.unsubscribe(dropped)
      this.pump()
    })
  }

  private retryLater(): void {
    if (this.retry) return
    const delay = this.retryMs
    this.retryMs = Math.min(RETRY_MAX_MS, this.retryMs * 2)
    this.retry = setTimeout(() => {
      this.retry = undefined
      this.pump()
    }, delay)
    this.retry.unref()
  }

  private unsubscribe(channels: string[]): void {
    this.connection
      ?.unsubscribe(...channels)
      .catch((error: unknown) => debug('unsubscribe failed: %o', error))
  }
}
