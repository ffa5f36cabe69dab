// What the store uses of a Redis client: the part of ioredis's surface it calls, which an ioredis
// `Redis` or `Cluster` has as is, and node-redis.ts gives a node-redis client (client.ts tells which).

export type Arg = string | number

/** A socket the store corks around a turn's writes (ioredis's `stream`). */
export interface Corkable {
  readonly destroyed: boolean
  cork(): void
  uncork(): void
}

/** What every connection answers: the commands the store sends, and its state. */
interface Commands {
  /** 'ready' when commands go out now; anything else names why not ('connecting', 'end'...). */
  readonly status: string
  fcall(fn: string, numKeys: number, ...args: Arg[]): Promise<unknown>
  evalsha(sha: string, numKeys: number, ...args: Arg[]): Promise<unknown>
  eval(lua: string, numKeys: number, ...args: Arg[]): Promise<unknown>
  /** A command the store sends as is (FUNCTION LOAD). */
  call(command: string, ...args: Arg[]): Promise<unknown>
  script(subcommand: 'LOAD', lua: string): Promise<unknown>
  info(section: 'server'): Promise<string>
  /** A new connection for pub/sub, of the same server or Cluster, owned by the caller. */
  duplicate(): Subscriber
  /** 'error' and 'ready', watched for a client the store owns. */
  on(event: 'error' | 'ready', listener: (error: Error) => void): unknown
  quit(): Promise<unknown>
  disconnect(): void
}

/** One server, or one Cluster master. */
export interface Connection extends Commands {
  /** False (ioredis types it as a boolean). */
  readonly isCluster: boolean
  /** The socket, while connected (ioredis only: a node-redis client corks its own writes). */
  readonly stream?: Corkable
}

export interface ClusterConnection extends Commands {
  readonly isCluster: true
  /** Every master, to load the Lua on. */
  nodes(role: 'master'): Connection[]
}

/** What the store sends its calls through. */
export type Client = Connection | ClusterConnection

/** The pub/sub connection of a store: 'message' (channel, message), 'ready', 'close' and 'error'. */
export interface Subscriber {
  readonly status: string
  on(event: 'message', listener: (channel: string, message: string) => void): unknown
  on(event: 'ready' | 'close', listener: () => void): unknown
  on(event: 'error', listener: (error: Error) => void): unknown
  connect(): Promise<unknown>
  subscribe(...channels: string[]): Promise<unknown>
  unsubscribe(...channels: string[]): Promise<unknown>
  quit(): Promise<unknown>
  disconnect(): void
}
