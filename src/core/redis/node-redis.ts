// A node-redis (v5) client or cluster as the store's Connection (connection.ts): its calls go through
// `sendCommand`, its error replies are marked as such, and its pub/sub runs on a connection of our own.
// node-redis is never imported: the client is recognised by its shape and used through its methods.
//
// What differs from ioredis, and why the store's rules still hold:
// - A reply lost with its connection: node-redis fails every command written and unanswered when the
//   socket closes (it resends none), so the store learns the call's outcome is unknown and gives back
//   what it may have taken (store.ts, invoke()), as it does for ioredis with resends off.
// - Writes: node-redis writes a tick's commands in one corked write itself; there is no socket to cork.
// - Pub/sub: a duplicate of the client (on Cluster, of the client of one master: a PUBLISH reaches
//   every node). node-redis subscribes again after a reconnect, as ioredis does; the store confirms
//   each channel again either way (subscriptions.ts).
import { EventEmitter } from 'node:events'
import type { Arg, ClusterConnection, Connection, Subscriber } from './connection.js'

type Listener = (message: string, channel: string) => void

/** A node-redis client (createClient()), as used here. */
interface NodeRedisClient {
  readonly isOpen: boolean
  readonly isReady: boolean
  sendCommand(args: string[], options?: CommandOptions): Promise<unknown>
  duplicate(overrides?: Record<string, unknown>): NodeRedisClient
  connect(): Promise<unknown>
  SUBSCRIBE(channels: string[], listener: Listener): Promise<unknown>
  UNSUBSCRIBE(channels: string[], listener: Listener): Promise<unknown>
  close?(): Promise<unknown>
  quit?(): Promise<unknown>
  destroy?(): void
  disconnect?(): Promise<unknown>
  on(event: string, listener: (...args: never[]) => void): unknown
}

interface NodeRedisNode {
  readonly host: string
  readonly port: number
}

/** The options of each call: the client's own type mapping (a user's `commandOptions` or
 * withTypeMapping()) would change the replies the store reads, so every call asks for none. */
interface CommandOptions {
  typeMapping: Record<string, never>
}
const OPTIONS: CommandOptions = Object.freeze({ typeMapping: Object.freeze({}) })

/** A node-redis cluster (createCluster()), as used here. */
interface NodeRedisCluster {
  readonly isOpen: boolean
  readonly masters: readonly NodeRedisNode[]
  readonly slots: readonly ({ master: NodeRedisNode } | undefined)[]
  sendCommand(
    firstKey: string | undefined,
    isReadonly: boolean | undefined,
    args: string[],
    options?: CommandOptions,
  ): Promise<unknown>
  nodeClient(node: NodeRedisNode): Promise<NodeRedisClient>
  once(event: 'connect', listener: () => void): unknown
  close?(): Promise<unknown>
  quit?(): Promise<unknown>
  destroy?(): void
  disconnect?(): Promise<unknown>
  on(event: string, listener: (...args: never[]) => void): unknown
}

type NodeRedis = NodeRedisClient | NodeRedisCluster

/** Whether `value` is shaped as a node-redis client or cluster (ioredis has no `isOpen`). */
export function isNodeRedis(value: object): value is NodeRedis {
  const candidate = value as Record<string, unknown>
  if (typeof candidate.isOpen !== 'boolean' || typeof candidate.sendCommand !== 'function') return false
  if (isNodeCluster(value as NodeRedis)) return Array.isArray(candidate.slots)
  return typeof candidate.duplicate === 'function' && typeof candidate.SUBSCRIBE === 'function'
}

function isNodeCluster(value: NodeRedis): value is NodeRedisCluster {
  return typeof (value as Partial<NodeRedisCluster>).nodeClient === 'function' && 'masters' in value
}

/** The store's Connection of a node-redis client or cluster. */
export function fromNodeRedis(value: NodeRedis): Connection | ClusterConnection {
  return isNodeCluster(value) ? new NodeRedisClusterConnection(value) : new NodeRedisConnection(value)
}

const replies = new WeakSet<Error>()

/** Whether node-redis failed a call of ours with an error reply of the server. */
export function isNodeRedisReply(error: Error): boolean {
  return replies.has(error)
}

/** An error reply's message starts with its code: ERR, NOSCRIPT, NOPERM, OOM... node-redis's own
 * failures ("The client is closed", "Socket closed unexpectedly") do not. */
const REPLY_CODE = /^[A-Z][A-Z_]+(?: |$)/

/** Mark an error reply (node-redis's ErrorReply; by its code when a minifier renamed the class), then
 * fail with it. */
function marked(error: unknown): never {
  if (error instanceof Error && (inChain(error, 'ErrorReply') || REPLY_CODE.test(error.message)))
    replies.add(error)
  throw error
}

function inChain(error: Error, name: string): boolean {
  for (let proto: unknown = Object.getPrototypeOf(error); proto; proto = Object.getPrototypeOf(proto))
    if ((proto as { constructor?: { name?: unknown } }).constructor?.name === name) return true
  return false
}

function strings(args: readonly Arg[]): string[] {
  return args.map(String)
}

/** Ends a node-redis client or cluster: close() in v5, quit() before. */
function closeClient(client: NodeRedis): Promise<unknown> {
  return client.close ? client.close() : client.quit ? client.quit() : Promise.resolve()
}

/** Ends a client at once, dropping what it has pending (it throws when already closed: then there
 * is nothing left to end). */
function destroyClient(client: NodeRedis): void {
  try {
    if (client.destroy) client.destroy()
    else void client.disconnect?.().catch(() => {})
  } catch {
    // closed already
  }
}

/** What a call of a client that is not open fails with (node-redis sends nothing before connect()). */
function notOpen(): Promise<never> {
  return Promise.reject(
    new Error(
      'the node-redis client is not open: connect it (await client.connect()) before the store sends a call, and close the store before the client',
    ),
  )
}

/** The commands of a Connection, sent by `send` (the command's first key routes it on a Cluster). */
abstract class NodeRedisCommands {
  protected abstract send(firstKey: string | undefined, args: string[]): Promise<unknown>
  protected abstract get open(): boolean
  abstract get status(): string

  private go(firstKey: string | undefined, args: string[]): Promise<unknown> {
    if (!this.open) return notOpen()
    return this.send(firstKey, args).catch(marked)
  }

  fcall(fn: string, numKeys: number, ...args: Arg[]): Promise<unknown> {
    return this.go(String(args[0]), ['FCALL', fn, String(numKeys), ...strings(args)])
  }

  evalsha(sha: string, numKeys: number, ...args: Arg[]): Promise<unknown> {
    return this.go(String(args[0]), ['EVALSHA', sha, String(numKeys), ...strings(args)])
  }

  eval(lua: string, numKeys: number, ...args: Arg[]): Promise<unknown> {
    return this.go(String(args[0]), ['EVAL', lua, String(numKeys), ...strings(args)])
  }

  call(command: string, ...args: Arg[]): Promise<unknown> {
    return this.go(undefined, [command, ...strings(args)])
  }

  script(subcommand: 'LOAD', lua: string): Promise<unknown> {
    return this.go(undefined, ['SCRIPT', subcommand, lua])
  }

  info(section: 'server'): Promise<string> {
    return this.go(undefined, ['INFO', section]) as Promise<string>
  }
}

class NodeRedisConnection extends NodeRedisCommands implements Connection {
  readonly isCluster = false as const

  constructor(private readonly client: NodeRedisClient) {
    super()
  }

  protected send(_firstKey: string | undefined, args: string[]): Promise<unknown> {
    return this.client.sendCommand(args, OPTIONS)
  }

  protected get open(): boolean {
    return this.client.isOpen
  }

  get status(): string {
    return this.client.isReady ? 'ready' : this.client.isOpen ? 'reconnecting' : 'closed'
  }

  duplicate(): Subscriber {
    return new NodeRedisSubscriber(() => Promise.resolve(subscriberOf(this.client)), false)
  }

  on(event: 'error' | 'ready', listener: (error: Error) => void): unknown {
    return this.client.on(event, listener)
  }

  quit(): Promise<unknown> {
    return closeClient(this.client)
  }

  disconnect(): void {
    destroyClient(this.client)
  }
}

class NodeRedisClusterConnection extends NodeRedisCommands implements ClusterConnection {
  readonly isCluster = true as const
  /** Resolves once the cluster has found its slots (it emits 'connect' then). */
  private discovery: Promise<void> | undefined

  constructor(private readonly cluster: NodeRedisCluster) {
    super()
  }

  /** A call made while the cluster is still finding its slots waits for them (node-redis fails it
   * with a TypeError otherwise); the store's deadline bounds the wait. */
  protected send(firstKey: string | undefined, args: string[]): Promise<unknown> {
    if (this.cluster.masters.length > 0) return this.cluster.sendCommand(firstKey, false, args, OPTIONS)
    return this.discovered().then(() => this.cluster.sendCommand(firstKey, false, args, OPTIONS))
  }

  /** Resolves once the cluster knows its masters: at once, or at its next 'connect'. A cluster that
   * is not open fails at once; one whose connect() fails leaves the wait to the store's deadline. */
  private discovered(): Promise<void> {
    if (this.cluster.masters.length > 0) return Promise.resolve()
    if (!this.cluster.isOpen) return notOpen()
    this.discovery ??= new Promise<void>((resolve) =>
      this.cluster.once('connect', () => {
        this.discovery = undefined
        resolve()
      }),
    )
    return this.discovery
  }

  protected get open(): boolean {
    return this.cluster.isOpen
  }

  get status(): string {
    if (!this.cluster.isOpen) return 'closed'
    return this.cluster.masters.length > 0 ? 'ready' : 'connecting'
  }

  nodes(): Connection[] {
    return this.cluster.masters.map(
      (master) => new NodeRedisNodeConnection(() => this.cluster.nodeClient(master), this.cluster),
    )
  }

  /** The master ('host:port') of `slot`; undefined until the cluster knows its slots. */
  masterOf(slot: number): string | undefined {
    const master = this.cluster.slots[slot]?.master
    return master ? `${master.host}:${master.port}` : undefined
  }

  /** A connection of our own to a master the cluster knows now (a PUBLISH on a Cluster reaches every
   * node); made again, to a master known then, when that one stops answering. */
  duplicate(): Subscriber {
    return new NodeRedisSubscriber(async () => {
      await this.discovered()
      const masters = this.cluster.masters
      const master = masters[Math.floor(Math.random() * masters.length)]
      if (!master) throw new Error('the node-redis cluster knows no master yet')
      return subscriberOf(await this.cluster.nodeClient(master))
    }, true)
  }

  on(event: 'error' | 'ready', listener: (error: Error) => void): unknown {
    return this.cluster.on(event, listener)
  }

  quit(): Promise<unknown> {
    return closeClient(this.cluster)
  }

  disconnect(): void {
    destroyClient(this.cluster)
  }
}

/** One master of a node-redis cluster (its client is the cluster's: the cluster connects it). */
class NodeRedisNodeConnection extends NodeRedisCommands implements Connection {
  readonly isCluster = false as const

  constructor(
    private readonly client: () => Promise<NodeRedisClient>,
    private readonly cluster: NodeRedisCluster,
  ) {
    super()
  }

  protected async send(_firstKey: string | undefined, args: string[]): Promise<unknown> {
    return (await this.client()).sendCommand(args, OPTIONS)
  }

  protected get open(): boolean {
    return this.cluster.isOpen
  }

  get status(): string {
    return this.cluster.isOpen ? 'ready' : 'closed'
  }

  duplicate(): Subscriber {
    return new NodeRedisSubscriber(async () => subscriberOf(await this.client()), false)
  }

  on(): unknown {
    return this
  }

  quit(): Promise<unknown> {
    return Promise.resolve()
  }

  disconnect(): void {}
}

/** A client for the store's pub/sub, from one of the user's: without the user's command options (a
 * type mapping) or client-side cache, which are the user's business. */
function subscriberOf(client: NodeRedisClient): NodeRedisClient {
  return client.duplicate({ commandOptions: undefined, clientSideCache: undefined })
}

/** Failed reconnects after which a cluster's subscriber is made again, to a master known then. */
const RECONNECTS_BEFORE_REMAKE = 3

/** The store's pub/sub connection: a node-redis client made and connected here, and ended here. Its
 * events as the store's Subscriber names them: 'ready', 'close' (the socket closed: node-redis
 * reconnects), 'error' and 'message' (channel, message). A client that stops reconnecting (its
 * reconnect strategy gave up) is made again; on a cluster, so is one that failed to reconnect
 * RECONNECTS_BEFORE_REMAKE times (its master may be gone for good: node-redis would retry its address
 * for ever). */
class NodeRedisSubscriber extends EventEmitter implements Subscriber {
  private client: NodeRedisClient | undefined
  private ended = false
  private made: Promise<NodeRedisClient | undefined>
  private reconnects = 0
  private readonly listener: Listener = (message, channel) => this.emit('message', channel, message)

  constructor(
    private readonly make: () => Promise<NodeRedisClient>,
    /** Whether a client that keeps failing to reconnect is made again (a cluster's). */
    private readonly remakeWhenStuck: boolean,
  ) {
    super()
    this.made = this.start()
  }

  private start(): Promise<NodeRedisClient | undefined> {
    return this.make().then(
      (client) => {
        if (this.ended) {
          destroyClient(client)
          return undefined
        }
        this.client = client
        this.reconnects = 0
        client.on('error', (error: Error) => {
          this.emit('error', error)
          if (!client.isOpen) this.remake(client) // it gave up reconnecting
        })
        client.on('ready', () => {
          this.reconnects = 0
          this.emit('ready')
        })
        client.on('reconnecting', () => {
          this.emit('close')
          if (this.remakeWhenStuck && ++this.reconnects > RECONNECTS_BEFORE_REMAKE) this.remake(client)
        })
        client.on('end', () => this.emit('close'))
        client.connect().catch((error: unknown) => {
          this.emit('error', error)
          this.remake(client)
        })
        return client
      },
      (error: unknown) => {
        this.emit('error', error)
        return undefined
      },
    )
  }

  /** Replace `client` (once) by a new one, unless ended. */
  private remake(client: NodeRedisClient): void {
    if (this.ended || this.client !== client) return
    this.client = undefined
    destroyClient(client)
    this.emit('close')
    this.made = this.start()
  }

  get status(): string {
    if (this.ended) return 'end'
    return this.client?.isReady ? 'ready' : 'connecting'
  }

  /** It connects as soon as it is made. */
  async connect(): Promise<unknown> {
    return this.made
  }

  subscribe(...channels: string[]): Promise<unknown> {
    const client = this.client
    if (!client?.isReady) return Promise.reject(new Error('the subscriber connection is not ready'))
    return client.SUBSCRIBE(channels, this.listener)
  }

  /** Sent whenever the client is open: node-redis queues it while it reconnects, and forgets the
   * channels, which it would otherwise subscribe again after the reconnect. */
  unsubscribe(...channels: string[]): Promise<unknown> {
    const client = this.client
    if (!client?.isOpen) return Promise.resolve()
    return client.UNSUBSCRIBE(channels, this.listener)
  }

  /** Ends it at once: nothing pending on it matters once the store closes (node-redis's close() would
   * wait for replies that may never come). */
  async quit(): Promise<unknown> {
    this.ended = true
    const client = this.client ?? (await this.made)
    if (client) destroyClient(client)
    return undefined
  }

  disconnect(): void {
    this.ended = true
    if (this.client) destroyClient(this.client)
  }
}
