// NestJS 11 on the Express platform with Tollgate's Express middleware, mounted the two ways Nest
// offers: app.use() for a global cap, and a module's MiddlewareConsumer for a per-route one.
//   npx tsx --tsconfig examples/nestjs/tsconfig.json examples/nestjs/app.ts
//   curl -i localhost:3000/reports/42   (two at once: one gets 503)
// This directory's tsconfig.json turns on experimentalDecorators, which Nest's decorators need. tsx
// and Vite do not emit decorator metadata, so whatever is injected names its token with @Inject().
import 'reflect-metadata'
import { pathToFileURL } from 'node:url'
import {
  Controller,
  type DynamicModule,
  Get,
  Inject,
  type INestApplication,
  type MiddlewareConsumer,
  Module,
  type NestModule,
  Param,
  Query,
  Req,
  RequestMethod,
} from '@nestjs/common'
import { NestFactory } from '@nestjs/core'
import type { Request } from 'express'
import { createMemoryStore, type Store } from '../../src/index.js' // in your app: 'tollgate'
import { semaphore } from '../../src/middleware/express.js' // in your app: 'tollgate/express'

@Controller()
class ReportsController {
  /** A slow endpoint: at most 1 in flight (AppModule's middleware). */
  @Get('reports/:id')
  async report(@Param('id') id: string, @Query('ms') ms: string | undefined, @Req() req: Request) {
    await new Promise((resolve) => setTimeout(resolve, Number(ms ?? 500)))
    // The lease's fencing token: pass it to downstreams that can reject a stale holder.
    return { id, fencingToken: req.tollgate?.fencingToken }
  }

  @Get('health')
  health() {
    return { ok: true }
  }
}

/** The store the limiters share: createRedisStore(redis) to share limits between instances. */
const TOLLGATE_STORE = Symbol('tollgate store')

@Module({ controllers: [ReportsController] })
class AppModule implements NestModule {
  constructor(@Inject(TOLLGATE_STORE) private readonly store: Store) {}

  static forRoot(store: Store): DynamicModule {
    return { module: AppModule, providers: [{ provide: TOLLGATE_STORE, useValue: store }] }
  }

  configure(consumer: MiddlewareConsumer): void {
    consumer
      .apply(semaphore({ permits: 1, maxWaitMs: 0, name: 'reports', store: this.store }))
      .forRoutes({ path: 'reports/:id', method: RequestMethod.GET })
  }
}

/** The app, not listening yet. Without a store, an in-memory one (limits for this process only). */
export async function createApp(options: { store?: Store; logger?: false } = {}): Promise<INestApplication> {
  const store = options.store ?? createMemoryStore()
  const app = await NestFactory.create(AppModule.forRoot(store), { logger: options.logger })
  // A global cap over every route: Nest's app.use() is Express's.
  app.use(semaphore({ permits: 100, maxWaitMs: 1000, name: 'global', store }))
  return app
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const app = await createApp()
  await app.listen(3000)
  console.log('listening on http://localhost:3000')
}
