// The store on Redis standalone or Cluster: every operation is one call of our Lua (lua/*.lua, each
// file's header is its contract; an FCALL of a function library loaded once per server, or EVALSHA
// where the server refuses functions: scripts.ts), sent through the coalescer (coalescer.ts) so that
// the acquires (and releases) of a name in one event-loop turn share a call; wake-ups by pub/sub on
// one connection.
import { debuglog } from 'node:util'
import { ConfigError, StoreUnavailableError } from '../errors.js'
import type { KeySpace } from '../keys.js'
import type {
  AdaptiveFamily,
  Grant,
  PermitFamily,
  RwLockFamily,
  Store,
  Unsubscribe,
} from '../protocol/store.js'
import { parseMessage } from '../protocol/store.js'
import { Deadlines, TimeoutError, within } from '../timeout.js'
import { isThenable } from '../thenable.js'
import { type Client, type Corkable, isCluster, isReplyError } from './client.js'
import { Coalescer } from './coalescer.js'
import { GiveBacks } from './give-backs.js'
import { fairKeys, scriptKeys } from './call-keys.js'
import { QueuedCall, VERBS } from './queued-call.js'
import { Reload } from './reload.js'
import { Subscriptions } from './subscriptions.js'
import { adaptiveFamily, type CallSpec, permitFamily, rwLockFamily, type ScriptCall } from './script-calls.js'
import { FCALL, type LuaRunner, REFUSED, type ScriptName, scriptRunner } from './scripts.js'

const debug = debuglog('tollgate:store')

/** The oldest Redis the scripts run on. */
const MIN_REDIS = [7, 0, 0] as const

/** Whether a version string ("7.0.15", "7.2.4-rc1") is at least `min`. */
function atLeast(version: string, min: readonly number[]): boolean {
  const parts = version.split('.').map((part) => Number.parseInt(part, 10))
  for (let i = 0; i < min.length; i++) {
    const have = parts[i] ?? 0
    if (Number.isNaN(have)) return true // not a version we can read: taken on trust
    if (have !== min[i]) return have > (min[i] as number)
  }
  return true
}

/** Calls sent straight that holdWrite() keeps in the corked socket at most before it writes them. */
const WRITES_PER_FLUSH = 16

/** Reloads a call waits for at most while it finds the Lua missing; then it fails with the server's
 * error (a server that loses the Lua as fast as it gets it). */
const MAX_RELOADS = 3

/** One subscriber of a channel: its grants, and a fair queue's shed tokens. */
interface Listener {
  onGrant(grant: Grant): void
  onShed: ((token: string) => void) | undefined
}

export class RedisStore implements Store {
  readonly kind = 'redis'
  /** True after close(): every call then fails with StoreUnavailableError. */
  closed = false
  private readonly coalescer = new Coalescer<ScriptCall>(
    (calls, straight) => {
      if (straight) this.holdWrite()
      void this.send(calls)
      if (this.held >= WRITES_PER_FLUSH) this.flushHeld()
    },
    setImmediate,
    (sends) => this.corked(sends),
  )
  /** Calls sent straight and held in the corked socket (holdWrite()), and that socket. */
  private held = 0
  private heldStream: Corkable | undefined
  private readonly deadlines: Deadlines
  /** Wake-ups: one subscriber connection. On Cluster, PUBLISH from a script reaches every node, so
   * one subscribed connection to any node hears all grants. */
  private readonly subscriptions: Subscriptions
  private readonly listeners = new Map<string, Set<Listener>>()
  /** Give-backs of acquires whose outcome nobody learnt (give-backs.ts). */
  private readonly giveBacks: GiveBacks
  /** The server's version check (checkVersion()), and whether it passed. */
  private version: Promise<void> | undefined
  private versionChecked = false
  /** How the Lua runs: as functions (FCALL) until the server refuses them, then as scripts (EVALSHA). */
  private runner: LuaRunner = FCALL
  /** Script calls sent so far: each call's sequence number, which a reload keeps them in. */
  private sent = 0
  /** The Lua being loaded again, and the calls waiting for it (reload.ts). */
  private reload: Reload | undefined
  /** The last connection error of a client the store owns (a client passed in stays the user's: its
   * 'error' events are left to the user, who may rely on ioredis printing them). */
  private connectionError: Error | undefined

  readonly permits: PermitFamily = permitFamily((spec) => this.call(spec), this.deliver.bind(this), fairKeys)
  readonly rwlock: RwLockFamily = rwLockFamily((spec) => this.call(spec))
  readonly adaptive: AdaptiveFamily = adaptiveFamily((spec) => this.call(spec))

  /** The client; undefined while the one for a URL is being made (`connecting`). */
  private redis: Client | undefined
  /** The client for a URL, until it is made (or could not be: every call then fails with why). */
  private readonly connecting: Promise<Client> | undefined

  constructor(
    client: Client | Promise<Client>,
    private readonly owned: boolean,
    readonly prefix: string,
    readonly commandTimeoutMs: number,
  ) {
    this.deadlines = new Deadlines(commandTimeoutMs)
    this.giveBacks = new GiveBacks(() => this.closed, commandTimeoutMs)
    this.subscriptions = new Subscriptions(
      () => this.redis as Client,
      commandTimeoutMs,
      (channel, message) => this.deliver(channel, message),
    )
    // A promise of a client (a URL's, being made), told by its then(): no client has one.
    if (isThenable(client)) {
      this.connecting = (client as Promise<Client>).then((made) => {
        this.redis = made
        this.watch(made)
        return made
      })
      // A setup error (ioredis not installed) fails every call; said once here too, since a policy
      // that fails open would otherwise run without a limit and show only outages.
      this.connecting.catch((error: unknown) => {
        debug('could not make the client: %o', error)
        if (error instanceof ConfigError) process.emitWarning(error.message, { code: 'TOLLGATE_NO_CLIENT' })
      })
    } else {
      this.redis = client as Client
      if (owned) this.watch(client as Client)
    }
  }

  /** Ours to watch: without a listener, ioredis prints "Unhandled error event" at every reconnect
   * attempt. Failed calls say what happened instead (failure()). */
  private watch(redis: Client): void {
    redis.on('error', (error: Error) => {
      this.connectionError = error
      debug('connection error: %s', error.message)
    })
    redis.on('ready', () => {
      this.connectionError = undefined
    })
  }

  get notificationsHealthy(): boolean {
    return this.subscriptions.healthy
  }

  async subscribe(
    space: KeySpace,
    onGrant: (grant: Grant) => void,
    onShed?: (token: string) => void,
  ): Promise<Unsubscribe> {
    if (this.closed) return () => {} // no new connection after close(); waiters fail on their next call
    const channel = space.channel
    let set = this.listeners.get(channel)
    if (!set) {
      set = new Set()
      this.listeners.set(channel, set)
    }
    const listener: Listener = { onGrant, onShed }
    set.add(listener)
    const unsubscribe = () => {
      const current = this.listeners.get(channel)
      if (!current?.delete(listener) || current.size > 0) return
      this.listeners.delete(channel)
      this.subscriptions.remove(channel)
    }
    // Until Redis confirms it, waiting degrades to backoff re-checks; it never fails an acquire.
    if (!this.redis) {
      try {
        await this.connecting
      } catch {
        return unsubscribe // no client: every call fails, and says why
      }
      if (this.closed) return unsubscribe
    }
    await this.subscriptions.add(channel)
    return unsubscribe
  }

  async close(): Promise<void> {
    if (this.closed) return
    this.closed = true
    this.listeners.clear()
    // A client still being made is ended once made, before close() resolves.
    const redis = this.redis ?? (await this.connecting?.catch(() => undefined))
    await Promise.allSettled([this.subscriptions.close(), this.owned && redis ? quit(redis) : undefined])
  }

  /** Hand a name's message to this process's listeners of its channel: its grants, then a fair
   * queue's shed tokens. */
  deliver(channel: string, message: string): void {
    const set = this.listeners.get(channel)
    if (!set) return
    const { grants, shed } = parseMessage(message)
    for (const grant of grants) for (const listener of set) listener.onGrant(grant)
    for (const token of shed) for (const listener of set) listener.onShed?.(token)
  }

  /** Queue a script call of a name (sent at once or with its turn's batch, see coalescer.ts). */
  private call<T>(spec: CallSpec & { pick: (reply: unknown, i: number) => T }): Promise<T> {
    if (this.closed) return Promise.reject(this.failure(spec.script, spec.space, undefined))
    return new Promise<T>((resolve, reject) =>
      this.coalescer.submit(new QueuedCall(spec, resolve as (value: unknown) => void, reject)),
    )
  }

  /**
   * Run `sends` with the connection's socket corked: the script calls of one turn's batches (an
   * acquire batch and a release batch, often) leave in one write instead of one each. ioredis writes
   * a command to its socket synchronously when connected (and queues it otherwise). A Cluster has a
   * socket per node: sent as they come.
   */
  /** The socket of a standalone connection that is ready, to cork; undefined otherwise (Cluster,
   * connecting). */
  private socket(): Corkable | undefined {
    const redis = this.redis
    const stream = redis && !isCluster(redis) && redis.status === 'ready' ? redis.stream : undefined
    return stream && !stream.destroyed ? stream : undefined
  }

  private corked(sends: () => void): void {
    const stream = this.socket()
    if (!stream) return sends()
    stream.cork()
    try {
      sends()
    } finally {
      stream.uncork()
    }
  }

  /**
   * Hold back a call sent straight (nothing of its name on the way) while calls of other names are on
   * the way: the socket stays corked until the microtasks running now are done, or WRITES_PER_FLUSH
   * calls are held, whichever comes first. The replies of a burst of names arrive together, and the
   * calls they lead to are made in the same microtasks: they leave in a few writes instead of one
   * each (a write is a system call, the larger part of a call's client CPU). A lone call, with
   * nothing else on the way, is written at once, and no call waits for the event loop. The cap of
   * WRITES_PER_FLUSH keeps Redis busy while the client reads a burst of replies: flushing only once
   * the microtasks are done makes the two take turns (docs/cost.md, "How the store calls Redis").
   */
  private holdWrite(): void {
    if (this.held > 0) {
      this.held++ // written with the others once WRITES_PER_FLUSH are held (after its send)
      return
    }
    if (this.coalescer.busy() <= 1) return // only this call's name is on the way
    const stream = this.socket()
    if (!stream) return
    stream.cork()
    this.held = 1
    this.heldStream = stream
    queueMicrotask(this.flushHeld)
  }

  private readonly flushHeld = (): void => {
    if (this.held === 0) return
    this.held = 0
    const stream = this.heldStream
    this.heldStream = undefined
    stream?.uncork()
  }

  /**
   * Run a script: FCALL of its function; EVALSHA of its family when functions are refused. Either way, a
   * server that lost the Lua (answers "Function not found" or NOSCRIPT: the call did not run) gets it
   * again, and the calls it failed run then, in the order they were made (reload.ts); of the calls
   * that did run ahead of a failed one, only a release runs once more (RUN_AGAIN). A refused FCALL did
   * not run either: it switches the store to EVALSHA through the same barrier.
   */
  private async run(
    script: ScriptName,
    keys: readonly string[],
    channel: string,
    args: readonly (string | number)[],
  ): Promise<unknown> {
    const seq = this.sent++
    if (this.reload) await this.reload.turn(seq)
    for (let reloads = 0; ; reloads++) {
      const runner = this.runner
      let reply: unknown
      try {
        reply = await runner.call(this.redis as Client, script, keys, channel, args)
      } catch (error) {
        const refused = replyMessage(error)
        if (refused === undefined) throw error
        if (runner === FCALL && REFUSED.test(refused)) this.refuseFunctions(refused)
        else if (!runner.missing.test(refused) || reloads >= MAX_RELOADS) throw error
        // Missing again after a reload: lost again meanwhile (a second restart or flush while the
        // load was on the way), or on a node the load missed: it waits for the next reload.
        await this.reloading(seq).failed(seq)
        continue
      }
      const reload = this.reload
      if (reload?.ranOutOfOrder(seq) && RUN_AGAIN.has(script)) {
        // A release that ran before calls made earlier that failed: again after them (its reply
        // stands; reload.ts says why only releases).
        void reload
          .turn(seq)
          .then(() => this.run(script, keys, channel, args))
          .catch((error: unknown) => debug('running a call again after a reload failed: %o', error))
      }
      return reply
    }
  }

  /** The reload under way, or a new one from the call `seq` that found the Lua missing. */
  private reloading(seq: number): Reload {
    this.reload ??= new Reload(
      seq,
      this.sent,
      () => this.load(),
      () => {
        this.reload = undefined
      },
    )
    return this.reload
  }

  /** Load the Lua the way it runs now: on each master of a Cluster, else on the connection, within the
   * command timeout (the calls waiting for it fail then, and the next call tries again). A server
   * that refuses functions makes the store run scripts (EVALSHA) from then on: loaded then. */
  private async load(): Promise<void> {
    const redis = this.redis as Client
    const nodes = isCluster(redis) ? redis.nodes('master') : [redis]
    const runner = this.runner
    try {
      const loaded = await within(runner.load(nodes), this.commandTimeoutMs)
      if (!loaded.ok) throw loaded.error
    } catch (error) {
      const refused = replyMessage(error)
      if (runner !== FCALL || refused === undefined || !REFUSED.test(refused)) throw error
      this.refuseFunctions(refused)
    }
    // Functions refused by this load or by a call meanwhile: the waiting calls go as EVALSHA.
    if (this.runner !== runner) await this.load()
  }

  /** FUNCTION LOAD or FCALL refused for good (REFUSED: an ACL without them, a server or proxy without
   * functions): run the same code as scripts (EVALSHA) from then on. (OOM and MISCONF refusals are
   * passing: they fail the call, as they would an EVALSHA, and functions stay.) */
  private refuseFunctions(reason: string): void {
    if (this.runner !== FCALL) return
    this.runner = scriptRunner()
    debug('Redis refuses functions (%s): running the scripts with EVALSHA instead', reason)
  }

  /**
   * The error of a failed call, in the user's words: what could not be done, and why (Redis did not
   * answer in time, or failed the call, or the store is closed), with the state of the connection when
   * it is not up and, for a client the store owns, the last connection error (as the cause too).
   */
  private failure(script: ScriptName, space: KeySpace, error: unknown): StoreUnavailableError {
    const what = `Could not ${VERBS[script]} "${space.name}"`
    if (this.closed)
      return new StoreUnavailableError(`${what}: the store is closed (store.close() was called).`)
    // No client yet: what is missing is the reason itself.
    const status = this.redis?.status ?? 'ready'
    const link =
      status === 'ready'
        ? ''
        : `; the connection to Redis is ${status}${this.connectionError ? ` (${this.connectionError.message})` : ''}`
    if (error instanceof TimeoutError) {
      return new StoreUnavailableError(
        `${what}: Redis did not answer within ${this.commandTimeoutMs} ms (option "commandTimeoutMs")${link}.`,
        { cause: status === 'ready' ? error : (this.connectionError ?? error) },
      )
    }
    const reason = error instanceof Error ? error.message.replace(/\.$/, '') : String(error)
    return new StoreUnavailableError(`${what}: ${reason}${link}.`, { cause: error })
  }

  /**
   * Check once that the server runs Redis 7.0 or later (the scripts use PEXPIREAT ... GT/NX from 7.0,
   * SET ... PXAT ... GET and ZMSCORE from 6.2): INFO server before the first call. A server that does
   * not answer is checked again at the next call; one that refuses INFO (renamed) is taken on trust.
   */
  private checkVersion(): Promise<void> {
    this.version ??= (async () => {
      let info: string
      try {
        const answered = await within((this.redis as Client).info('server'), this.commandTimeoutMs)
        if (!answered.ok) throw answered.error
        info = answered.value
      } catch (error) {
        if (isReplyError(error)) {
          this.versionChecked = true
          return
        }
        this.version = undefined // not reachable now: the call fails on its own, and the next one asks
        return
      }
      const found = /^redis_version:(\S+)/m.exec(info)?.[1]
      if (found && !atLeast(found, MIN_REDIS)) {
        throw new StoreUnavailableError(
          `Redis ${found} is too old: tollgate needs Redis ${MIN_REDIS.join('.')} or later (its scripts use ` +
            'PEXPIREAT with GT and NX). Upgrade the server.',
        )
      }
      this.versionChecked = true
    })()
    return this.version
  }

  /** Send calls of one name and kind as one script call; each caller gets its own part of the reply. */
  private async send(calls: readonly ScriptCall[]): Promise<void> {
    const first = calls[0] as ScriptCall
    if (!this.redis) {
      try {
        await this.connecting
      } catch (error) {
        this.coalescer.landed(first.name)
        for (const call of calls) call.reject(this.failure(first.script, first.space, error))
        return
      }
    }
    if (!this.versionChecked) {
      try {
        await this.checkVersion()
      } catch (error) {
        this.coalescer.landed(first.name)
        for (const call of calls) call.reject(error)
        return
      }
    }
    const args = first.withToken ? [...first.head, ...calls.map((call) => call.token)] : [...first.head]
    const late = first.late && ((reply: unknown) => calls.forEach((call, i) => call.late?.(call, reply, i)))
    const unknown =
      first.undo && (() => calls.forEach((call) => call.undo && this.giveBacks.start(call.undo(call))))
    let reply: unknown
    try {
      reply = await this.invoke(first, args, late, unknown)
    } catch (error) {
      this.coalescer.landed(first.name)
      for (const call of calls) call.reject(error)
      return
    }
    this.coalescer.landed(first.name)
    // Waking this process's waiters is no caller's business; each caller gets its own row, whatever
    // happens to the others'.
    try {
      first.onReply?.(first, reply)
    } catch (error) {
      debug('handing on grants failed: %o', error)
    }
    calls.forEach((call, i) => {
      try {
        call.resolve(call.pick(reply, i))
      } catch (error) {
        call.reject(error)
      }
    })
  }

  private async invoke(
    { script, space, keys: given, started }: ScriptCall,
    args: (string | number)[],
    onLateReply: ((reply: unknown) => void) | undefined,
    /** The call failed and Redis may have run it: give back what it may have taken. */
    onUnknown: (() => void) | undefined,
  ): Promise<unknown> {
    if (this.closed) throw this.failure(script, space, undefined)
    const keys = given ?? scriptKeys(space, script.startsWith('tgRw'))
    const pending = this.run(script, keys, space.channel, args)
    try {
      return await this.deadlines.watch(pending, started + this.commandTimeoutMs)
    } catch (error) {
      // Redis may have run it, and nobody may ever learn: a reply lost with its connection and not
      // resent leaves the call pending for ever (ioredis with autoResendUnfulfilledCommands off), or
      // failed. Give back what it may have taken now; a give-back is a release, a no-op if it took
      // nothing. Timed out, the reply may still come after the give-back (a resend that ran later):
      // then it says what to give back, and a late failure may have run too.
      onUnknown?.()
      if (error instanceof TimeoutError) pending.then(onLateReply, onUnknown ?? (() => {}))
      else pending.catch(() => {})
      throw this.failure(script, space, error)
    }
  }
}

/** The message of an error reply of the server; undefined for any other failure. */
function replyMessage(error: unknown): string | undefined {
  return isReplyError(error) ? error.message : undefined
}

/** The scripts a reload runs again when they ran ahead of an earlier call that failed (reload.ts). */
const RUN_AGAIN: ReadonlySet<ScriptName> = new Set<ScriptName>(['tgPermitRelease', 'tgRwRelease'])

async function quit(client: Client): Promise<void> {
  const done = await within(client.quit(), 1000)
  if (!done.ok) client.disconnect()
}
