// The redlock package (5.0.0-beta.2) ships types, but its package.json "exports" has no "types"
// condition, so NodeNext resolution cannot find them. This declares the part the benchmark uses.
declare module 'redlock' {
  import type { Cluster, Redis } from 'ioredis'

  export interface Settings {
    driftFactor: number
    retryCount: number
    retryDelay: number
    retryJitter: number
    automaticExtensionThreshold: number
  }

  export interface Lock {
    readonly value: string
    expiration: number
    release(): Promise<unknown>
  }

  export default class Redlock {
    constructor(clients: Iterable<Redis | Cluster>, settings?: Partial<Settings>)
    acquire(resources: string[], duration: number, settings?: Partial<Settings>): Promise<Lock>
  }
}
