import { debuglog } from 'node:util'
import { Cluster, Redis } from 'ioredis'
import { ConfigError, StoreUnavailableError } from './errors.js'
import type { KeySpace } from './keys.js'
import { defined, isPlainObjectOrUndefined, keyPrefix, positiveInt } from './options.js'
import { nowIndex, registerScripts, type ScriptClient, type ScriptName } from './scripts.js'
import {
  type AcquireReply,
  type AcquireRequest,
  type Grant,
  type PermitStats,
  parseGrants,
  type RecheckReply,
  type ReleaseResult,
  type RenewReply,
  type RwAcquireReply,
  type RwAcquireRequest,
  type RwMode,
  type RwStats,
  type Store,
  type Unsubscribe,
  type Acquisition,
  type WaiterState,
} from './store.js'

const debug = debuglog('tollgate:store')

export interface RedisStoreOptions {
  /** Prefix of every key and channel. Must not contain braces (they would move the hash tag).
   * @default 'tollgate' */
  prefix?: string
  /** A store call that takes longer fails with StoreUnavailableError, so no caller hangs because
   * Redis hangs. A permit granted by a call that timed out is given back when its reply arrives.
   * @default 2000 */
  commandTimeoutMs?: number
}

const DEFAULTS = Object.freeze({ prefix: 'tollgate', commandTimeoutMs: 2000 })

/** KEYS of each family of scripts (lua/lib/permits.lua, lua/lib/rwlock.lua), all under one hash tag. */
const PERMIT_PARTS = ['h', 'q', 'w', 'm', 'p', 'f'] as const
const RW_PARTS = ['r', 'x', 'q', 'w', 'm'] as const
const RW_MODES: Record<RwMode, string> = { read: 'r', write: 'w' }

const RELEASE_RESULTS: Record<number, ReleaseResult> = {
  0: 'none',
  1: 'freed',
  2: 'decremented',
  3: 'dequeued',
}

/**
 * A store on Redis standalone or Redis Cluster. Pass the ioredis client you already have (it stays
 * yours: `close()` does not quit it) or a `redis://` URL (then the store owns and closes the client).
 */
export function createRedisStore(client: Redis | Cluster | string, options?: RedisStoreOptions): Store {
  isPlainObjectOrUndefined('options', options)
  const config = { ...DEFAULTS, ...defined(options) }
  const prefix = keyPrefix('prefix', config.prefix)
  const commandTimeoutMs = positiveInt('commandTimeoutMs', config.commandTimeoutMs, 600_000)
  let redis: Redis | Cluster
  let owned = false
  if (typeof client === 'string') {
    if (!/^rediss?:\/\//.test(client))
      throw new ConfigError('client', 'an ioredis client or a redis:// URL', client)
    redis = new Redis(client, { lazyConnect: false })
    owned = true
  } else if (client instanceof Redis || client instanceof Cluster) {
    redis = client
  } else {
    throw new ConfigError('client', 'an ioredis Redis or Cluster instance, or a redis:// URL', client)
  }
  registerScripts(redis)
  return new RedisStore(redis, owned, prefix, commandTimeoutMs)
}

/** Most tokens in one batched call (keeps the script's unpack() and its reply small). */
const MAX_BATCH = 256

type BatchScript = 'tgPermitAcquire' | 'tgPermitRelease'

interface Batch {
  readonly script: BatchScript
  readonly space: KeySpace
  /** The ARGV before the tokens (after the channel): the options every call in the batch shares. */
  readonly head: (string | number)[]
  readonly tokens: string[]
  readonly calls: { resolve(value: unknown): void; reject(error: unknown): void }[]
  readonly started: number
  /** The i-th caller's result from the script's reply. */
  readonly parse: (reply: unknown[], i: number) => unknown
  readonly onLateReply: ((reply: unknown[], tokens: readonly string[]) => void) | undefined
  readonly onReply: ((reply: unknown[]) => void) | undefined
}

const DEFERRED = Symbol('deferred call')

function newBatch(
  script: BatchScript,
  space: KeySpace,
  head: (string | number)[],
  parse: Batch['parse'],
  onLateReply: Batch['onLateReply'],
  onReply: Batch['onReply'],
): Batch {
  return { script, space, head, tokens: [], calls: [], started: Date.now(), parse, onLateReply, onReply }
}

function joinBatch(batch: Batch, token: string): Promise<unknown> {
  batch.tokens.push(token)
  return new Promise((resolve, reject) => batch.calls.push({ resolve, reject }))
}

class RedisStore implements Store {
  readonly kind = 'redis'
  clockOffsetMs = 0
  /** Per script, name and options: the batch this turn's calls join. */
  private readonly openBatches = new Map<string, Batch>()
  /** Per name (channel): acquire/release calls sent and not answered yet. */
  private readonly inFlight = new Map<string, number>()
  /** Names that sent a call straight in this turn while another was in flight. */
  private readonly sentThisTurn = new Set<string>()
  /** Per name (channel): the last batch queued this turn, or DEFERRED for a plain call queued after it. */
  private readonly lastQueued = new Map<string, Batch | typeof DEFERRED>()
  /** Sends waiting for the end of the turn, in call order. */
  private queued: (() => void)[] = []
  private turnScheduled = false
  private readonly scripts: ScriptClient
  private subscriber: Redis | Cluster | undefined
  private readonly listeners = new Map<string, Set<(grant: Grant) => void>>()
  private readonly pendingSubscribe = new Map<string, Promise<unknown>>()
  /** True after close(): every call then fails with StoreUnavailableError. */
  closed = false
  private readonly deadlines: Deadlines

  constructor(
    private readonly redis: Redis | Cluster,
    private readonly owned: boolean,
    readonly prefix: string,
    private readonly commandTimeoutMs: number,
  ) {
    this.scripts = redis as unknown as ScriptClient
    this.deadlines = new Deadlines(commandTimeoutMs)
  }

  get notificationsHealthy(): boolean {
    return this.subscriber?.status === 'ready'
  }

  acquire(space: KeySpace, r: AcquireRequest): Promise<AcquireReply> {
    return this.batched(
      'tgPermitAcquire',
      space,
      [r.ttlMs, r.permits, r.enqueue ? 1 : 0, r.waiterTtlMs, r.op ?? ''],
      r.token,
      r.op === undefined,
      acquireRow,
      // Grants (and queue places) whose reply came too late are handed straight back: nothing is lost.
      (late, tokens) =>
        tokens.forEach((token, i) => {
          const [code, position] = late[i + 1] as number[]
          if (code === 1 || position !== -1) {
            this.release(space, token, r.permits, r.op).catch((error) =>
              debug('late release failed: %o', error),
            )
          }
        }),
    ) as Promise<AcquireReply>
  }

  release(space: KeySpace, token: string, permits: number, op?: string): Promise<ReleaseResult> {
    return this.batched(
      'tgPermitRelease',
      space,
      [permits, op ?? ''],
      token,
      op === undefined,
      releaseRow,
      undefined,
      // Wake our own waiters now; the same grants still arrive by pub/sub for every process (the wait
      // group takes a grant once, for the acquisition it names).
      (reply) => {
        if (reply[0]) this.deliver(space.channel, reply[0] as string)
      },
    ) as Promise<ReleaseResult>
  }

  async renew(space: KeySpace, ttlMs: number, holds: readonly Acquisition[]): Promise<RenewReply> {
    const [now, ...expiresAt] = (await this.call('tgPermitRenew', space, [
      ttlMs,
      ...waitArgs(holds),
    ])) as number[]
    return { now: now as number, expiresAt }
  }

  async recheck(
    space: KeySpace,
    permits: number,
    waiterTtlMs: number,
    waits: readonly Acquisition[],
  ): Promise<RecheckReply> {
    const [now, nextExpiry, ...rows] = (await this.call('tgPermitRecheck', space, [
      permits,
      waiterTtlMs,
      ...waitArgs(waits),
    ])) as [number, number, ...number[][]]
    return { now, nextExpiry, states: rows.map(waiterState) }
  }

  async inspect(space: KeySpace): Promise<PermitStats> {
    const [holders, queued, limit] = (await this.call('tgPermitInspect', space, [])) as number[]
    return { holders: holders as number, queued: queued as number, limit: limit || undefined }
  }

  async setLimit(space: KeySpace, permits: number | undefined): Promise<void> {
    await this.call('tgPermitSetLimit', space, [permits ?? 0])
  }

  async rwAcquire(space: KeySpace, r: RwAcquireRequest): Promise<RwAcquireReply> {
    const reply = (await this.call(
      'tgRwAcquire',
      space,
      [r.token, RW_MODES[r.mode], r.ttlMs, r.enqueue ? 1 : 0, r.waiterTtlMs, r.op],
      // A grant (or queue entry) whose reply came too late is handed straight back: nothing is lost.
      (late) => {
        const [code, position] = late as number[]
        if (code === 1 || (code === 0 && position !== -1)) {
          this.rwRelease(space, r.token, r.mode, r.op).catch((error) =>
            debug('late release failed: %o', error),
          )
        }
      },
    )) as number[]
    const [code, a, b, now] = reply as [number, number, number, number]
    if (code === 1) return { granted: true, fence: a, expiresAt: b, now }
    if (code === 0) return { granted: false, position: a, nextExpiry: b, now }
    return { granted: false, refused: code === -1 ? 'upgrade' : 'waiting', now }
  }

  async rwRelease(space: KeySpace, token: string, mode: RwMode, op: string): Promise<ReleaseResult> {
    const result = (await this.call('tgRwRelease', space, [token, RW_MODES[mode], op])) as number
    return RELEASE_RESULTS[result] ?? 'none'
  }

  async rwRenew(
    space: KeySpace,
    mode: RwMode,
    ttlMs: number,
    holds: readonly Acquisition[],
  ): Promise<RenewReply> {
    const [now, ...expiresAt] = (await this.call('tgRwRenew', space, [
      RW_MODES[mode],
      ttlMs,
      ...waitArgs(holds),
    ])) as number[]
    return { now: now as number, expiresAt }
  }

  async rwRecheck(
    space: KeySpace,
    waiterTtlMs: number,
    waits: readonly Acquisition[],
  ): Promise<RecheckReply> {
    const [now, nextExpiry, ...rows] = (await this.call('tgRwRecheck', space, [
      waiterTtlMs,
      ...waitArgs(waits),
    ])) as [number, number, ...number[][]]
    return { now, nextExpiry, states: rows.map(waiterState) }
  }

  async rwInspect(space: KeySpace): Promise<RwStats> {
    const [readers, writers, queued] = (await this.call('tgRwInspect', space, [])) as number[]
    return { readers: readers as number, writer: (writers as number) > 0, queued: queued as number }
  }

  async subscribe(space: KeySpace, onGrant: (grant: Grant) => void): Promise<Unsubscribe> {
    if (this.closed) return () => {} // no new connection after close(); waiters fail on their next call
    const channel = space.channel
    let set = this.listeners.get(channel)
    if (!set) {
      set = new Set()
      this.listeners.set(channel, set)
    }
    set.add(onGrant)
    const unsubscribe = () => {
      const current = this.listeners.get(channel)
      if (!current?.delete(onGrant) || current.size > 0) return
      this.listeners.delete(channel)
      this.pendingSubscribe.delete(channel)
      this.subscriber?.unsubscribe(channel).catch((error) => debug('unsubscribe failed: %o', error))
    }
    let pending = this.pendingSubscribe.get(channel)
    if (!pending) {
      pending = this.ensureSubscriber().subscribe(channel)
      this.pendingSubscribe.set(channel, pending)
    }
    try {
      await withTimeout(pending, this.commandTimeoutMs)
    } catch (error) {
      // Waiting degrades to backoff re-checks while the subscriber is down; it never fails an acquire.
      this.pendingSubscribe.delete(channel)
      debug('subscribe %s failed: %o', channel, error)
    }
    return unsubscribe
  }

  async close(): Promise<void> {
    if (this.closed) return
    this.closed = true
    const subscriber = this.subscriber
    this.subscriber = undefined
    this.listeners.clear()
    await Promise.allSettled([
      subscriber ? quit(subscriber) : undefined,
      this.owned ? quit(this.redis) : undefined,
    ])
  }

  /** Hand a grant message to this process's listeners of a channel. */
  private deliver(channel: string, message: string): void {
    const set = this.listeners.get(channel)
    if (!set) return
    for (const grant of parseGrants(message)) for (const listener of set) listener(grant)
  }

  /** One subscriber connection per store, multiplexing every channel. On Cluster, PUBLISH from a
   * script reaches every node, so one subscribed connection to any node hears all grants. */
  private ensureSubscriber(): Redis | Cluster {
    if (this.subscriber) return this.subscriber
    const subscriber = this.redis.duplicate()
    subscriber.on('error', (error: Error) => debug('subscriber error: %s', error.message))
    subscriber.on('message', (channel: string, message: string) => this.deliver(channel, message))
    this.subscriber = subscriber
    return subscriber
  }

  /**
   * Acquires (or releases) of one name with the same options share script calls. A call goes out at
   * once when nothing of its name is in flight or queued (a lone call waits for nothing and costs no
   * batching), and once per event-loop turn while others are in flight; the calls after that in the
   * turn join a batch sent from a setImmediate, after the turn's I/O callbacks, so a burst of requests
   * parsed in one turn shares one call. The script takes the tokens in order. Every call of a name
   * still reaches Redis in call order: a call joins the open batch of its kind only if nothing of that
   * name was queued after it, and other calls of the name (renew, recheck, ...) wait behind a queued
   * batch. `joinable` = false (a reentrant owner's call) never shares a call; nor does a token already in the
   * open batch (a second release of it must find it gone).
   */
  private batched(
    script: BatchScript,
    space: KeySpace,
    head: (string | number)[],
    token: string,
    joinable: boolean,
    parse: Batch['parse'],
    onLateReply?: Batch['onLateReply'],
    onReply?: Batch['onReply'],
  ): Promise<unknown> {
    if (this.closed) return Promise.reject(new StoreUnavailableError('The store is closed.'))
    const channel = space.channel
    const last = this.lastQueued.get(channel)
    if (last === undefined && !this.sentThisTurn.has(channel)) {
      // Straight out. While another call of the name is in flight, only once per turn: the calls
      // after it in the turn form a batch.
      if (this.inFlight.has(channel)) {
        this.sentThisTurn.add(channel)
        this.scheduleTurn()
      }
      const batch = newBatch(script, space, head, parse, onLateReply, onReply)
      const result = joinBatch(batch, token)
      void this.sendBatch(batch)
      return result
    }
    const key = joinable ? `${script}\n${channel}\n${head.join(' ')}` : undefined
    let batch = key === undefined ? undefined : this.openBatches.get(key)
    if (!batch || batch !== last || batch.tokens.length >= MAX_BATCH || batch.tokens.includes(token)) {
      const queued = newBatch(script, space, head, parse, onLateReply, onReply)
      if (key !== undefined) this.openBatches.set(key, queued)
      this.lastQueued.set(channel, queued)
      this.queued.push(() => void this.sendBatch(queued))
      this.scheduleTurn()
      batch = queued
    }
    return joinBatch(batch, token)
  }

  private scheduleTurn(): void {
    if (this.turnScheduled) return
    this.turnScheduled = true
    setImmediate(this.endTurn)
  }

  /** Once per turn in which calls were queued: send them, in call order. */
  private readonly endTurn = (): void => {
    const queued = this.queued
    this.queued = []
    this.openBatches.clear()
    this.lastQueued.clear()
    this.sentThisTurn.clear()
    this.turnScheduled = false
    for (const send of queued) send()
  }

  private async sendBatch(batch: Batch): Promise<void> {
    const { tokens, onLateReply } = batch
    const channel = batch.space.channel
    this.inFlight.set(channel, (this.inFlight.get(channel) ?? 0) + 1)
    let reply: unknown[]
    try {
      reply = (await this.call(
        batch.script,
        batch.space,
        [...batch.head, ...tokens],
        onLateReply && ((late) => onLateReply(late as unknown[], tokens)),
        batch.started,
      )) as unknown[]
    } catch (error) {
      this.landed(channel)
      for (const call of batch.calls) call.reject(error)
      return
    }
    this.landed(channel)
    // Waking this process's waiters is no caller's business; each caller gets its own row, whatever
    // happens to the others'.
    try {
      batch.onReply?.(reply)
    } catch (error) {
      debug('handing on grants failed: %o', error)
    }
    batch.calls.forEach((call, i) => {
      try {
        call.resolve(batch.parse(reply, i))
      } catch (error) {
        call.reject(error)
      }
    })
  }

  private landed(channel: string): void {
    const left = (this.inFlight.get(channel) ?? 1) - 1
    if (left > 0) this.inFlight.set(channel, left)
    else this.inFlight.delete(channel)
  }

  /** A script call; behind a batch of the same name queued in this turn, it is sent after that batch. */
  private call(
    script: ScriptName,
    space: KeySpace,
    args: (string | number)[],
    onLateReply?: (reply: unknown) => void,
    started = Date.now(),
  ): Promise<unknown> {
    if (!this.lastQueued.has(space.channel)) return this.send(script, space, args, onLateReply, started)
    this.lastQueued.set(space.channel, DEFERRED)
    return new Promise((resolve) =>
      this.queued.push(() => resolve(this.send(script, space, args, onLateReply, started))),
    )
  }

  private async send(
    script: ScriptName,
    space: KeySpace,
    args: (string | number)[],
    onLateReply: ((reply: unknown) => void) | undefined,
    started: number,
  ): Promise<unknown> {
    if (this.closed) throw new StoreUnavailableError('The store is closed.')
    const sent = Date.now()
    const pending = this.scripts[script](
      ...scriptKeys(space, script.startsWith('tgRw')),
      space.channel,
      ...args,
    )
    try {
      const reply = await this.deadlines.watch(pending, started + this.commandTimeoutMs)
      this.observeClock(script, reply, sent)
      return reply
    } catch (error) {
      if (error instanceof TimeoutError && onLateReply) pending.then(onLateReply, () => {})
      else pending.catch(() => {})
      throw new StoreUnavailableError(
        error instanceof TimeoutError
          ? `Redis did not answer ${script} for "${space.name}" within ${this.commandTimeoutMs} ms (option "commandTimeoutMs").`
          : `Redis failed ${script} for "${space.name}": ${(error as Error).message}`,
        { cause: error },
      )
    }
  }

  /** Array replies carry the server's `now`: first for renew/recheck, last for the others. */
  private observeClock(script: ScriptName, reply: unknown, started: number): void {
    const at = nowIndex(script)
    if (!at || !Array.isArray(reply)) return
    const now = at === 'first' ? reply[0] : reply[reply.length - 1]
    if (typeof now === 'number') this.clockOffsetMs = now - (started + Date.now()) / 2
  }
}

const keyCache = new WeakMap<KeySpace, { permit?: string[]; rw?: string[] }>()

/** The KEYS of a space's scripts, built once per space (they are on every call's hot path). */
function scriptKeys(space: KeySpace, rw: boolean): string[] {
  let cached = keyCache.get(space)
  if (!cached) {
    cached = {}
    keyCache.set(space, cached)
  }
  if (rw) return (cached.rw ??= RW_PARTS.map((part) => space.key(part)))
  return (cached.permit ??= PERMIT_PARTS.map((part) => space.key(part)))
}

/** The i-th caller's part of a batched reply: {now, row per token} / {grants, code per token}. */
const acquireRow = (reply: unknown[], i: number) => acquireReply(reply[i + 1] as number[], reply[0] as number)
const releaseRow = (reply: unknown[], i: number) => RELEASE_RESULTS[reply[i + 1] as number] ?? 'none'

function acquireReply(row: number[], now: number): AcquireReply {
  if (row[0] === 1) {
    const [, fence, expiresAt, holders] = row as [number, number, number, number]
    return { granted: true, fence, expiresAt, holders, now }
  }
  const [, position, nextExpiry] = row as [number, number, number]
  return { granted: false, position, nextExpiry, now }
}

/** Re-check and renew arguments: a token and its acquisition id ('' = the token is its own) each. */
function waitArgs(waits: readonly Acquisition[]): string[] {
  const args: string[] = []
  for (const wait of waits) args.push(wait.token, wait.op ?? '')
  return args
}

function waiterState(row: number[]): WaiterState {
  if (row[0] === 1) return { state: 'granted', fence: row[1] as number, expiresAt: row[2] as number }
  if (row[0] === 0) return { state: 'queued', position: row[1] as number }
  return { state: 'gone' }
}

class TimeoutError extends Error {}

/**
 * Command deadlines without a timer per call (the hot path): pending calls sit in a set that one
 * unref'd interval sweeps every tenth of the timeout, so a call fails within 1.1 x commandTimeoutMs.
 */
class Deadlines {
  private readonly pending = new Set<{ at: number; fail: (error: Error) => void }>()
  private sweeper: NodeJS.Timeout | undefined

  constructor(private readonly timeoutMs: number) {}

  watch<T>(promise: Promise<T>, at: number): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const entry = { at, fail: reject }
      this.pending.add(entry)
      this.sweeper ??= setInterval(() => this.sweep(), Math.max(5, Math.floor(this.timeoutMs / 10))).unref()
      promise.then(
        (value) => {
          this.pending.delete(entry)
          resolve(value)
        },
        (error: unknown) => {
          this.pending.delete(entry)
          reject(error)
        },
      )
    })
  }

  private sweep(): void {
    const now = Date.now()
    for (const entry of this.pending) {
      if (entry.at > now) continue
      this.pending.delete(entry)
      entry.fail(new TimeoutError(`timed out after ${this.timeoutMs} ms`))
    }
    if (this.pending.size === 0) {
      clearInterval(this.sweeper)
      this.sweeper = undefined
    }
  }
}

function withTimeout<T>(promise: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new TimeoutError(`timed out after ${ms} ms`)), ms)
  })
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer))
}

async function quit(client: Redis | Cluster): Promise<void> {
  try {
    await withTimeout(client.quit(), 1000)
  } catch {
    client.disconnect()
  }
}
