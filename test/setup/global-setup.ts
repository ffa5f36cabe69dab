// Vitest global setup: starts the shared Redis topology once per run and provides its addresses to
// every test file as inject('redis'). Teardown stops exactly the processes started here.
import type { TestProject } from 'vitest/node'
import {
  type RedisClusterHandle,
  type RedisServerHandle,
  type RedisTopology,
  startCluster,
  startRedisServer,
} from '../helpers/redis-server.js'

declare module 'vitest' {
  export interface ProvidedContext {
    redis: RedisTopology
  }
}

const INDEPENDENTS = 3

type Stoppable = RedisServerHandle | RedisClusterHandle

async function stopAll(started: Stoppable[]): Promise<void> {
  await Promise.allSettled(started.map((handle) => handle.stop()))
}

function value<T>(result: PromiseSettledResult<T> | undefined): T {
  if (result?.status !== 'fulfilled') throw new Error('redis global setup: a server failed to start')
  return result.value
}

const endpoint = ({ host, port }: { host: string; port: number }) => ({ host, port })

export default async function globalSetup({ provide }: TestProject): Promise<() => Promise<void>> {
  const startedAt = Date.now()
  const [standalone, cluster, ...independents] = await Promise.allSettled([
    startRedisServer(),
    startCluster(3),
    ...Array.from({ length: INDEPENDENTS }, () => startRedisServer()),
  ])
  const results = [standalone, cluster, ...independents]
  const started = results.flatMap((result) => (result?.status === 'fulfilled' ? [result.value] : []))
  const failed = results.find((result): result is PromiseRejectedResult => result?.status === 'rejected')
  if (failed) {
    await stopAll(started)
    throw failed.reason
  }

  provide('redis', {
    standalone: endpoint(value(standalone)),
    cluster: value(cluster).nodes.map(endpoint),
    independents: independents.map((result) => endpoint(value(result))),
  })
  if (process.env.TOLLGATE_TEST_VERBOSE) {
    console.log(`[tollgate] redis topology ready in ${Date.now() - startedAt} ms`)
  }

  return async () => {
    const stoppingAt = Date.now()
    await stopAll(started)
    if (process.env.TOLLGATE_TEST_VERBOSE)
      console.log(`[tollgate] redis stopped in ${Date.now() - stoppingAt} ms`)
  }
}
