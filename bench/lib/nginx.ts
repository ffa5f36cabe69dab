// nginx as the peer a production user would put in front of a service: one worker, upstream
// keep-alive, no access log, on 127.0.0.1, from a config generated here. Started in the foreground
// (daemon off) so it is stopped by its PID like every other process of a benchmark.
import { type ChildProcess, spawn } from 'node:child_process'
import { accessSync, constants } from 'node:fs'
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import { onProcessExit } from '../../test/helpers/process-cleanup.js'
import { reapPidOnDeath } from '../../test/helpers/reaper.js'
import { freePort } from '../../test/helpers/redis-server.js'

const CANDIDATES = ['/usr/sbin/nginx', '/usr/bin/nginx', '/usr/local/sbin/nginx', '/usr/local/bin/nginx']

export function nginxBinary(): string | undefined {
  for (const file of CANDIDATES) {
    try {
      accessSync(file, constants.X_OK)
      return file
    } catch {
      // not here
    }
  }
  return undefined
}

export interface Nginx {
  url: string
  /** The master's PID (its worker is its child). */
  pid: number
  stop(): Promise<void>
}

export async function startNginx(binary: string, upstreamPort: number): Promise<Nginx> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'tollgate-nginx-'))
  const port = await freePort()
  const isRoot = typeof process.getuid === 'function' && process.getuid() === 0
  const conf = `
daemon off;
worker_processes 1;
${isRoot ? 'user nobody nogroup;' : ''}
pid ${dir}/nginx.pid;
error_log ${dir}/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path ${dir}/body;
  proxy_temp_path ${dir}/proxy;
  fastcgi_temp_path ${dir}/fastcgi;
  uwsgi_temp_path ${dir}/uwsgi;
  scgi_temp_path ${dir}/scgi;
  keepalive_requests 100000;
  upstream up {
    server 127.0.0.1:${upstreamPort};
    keepalive 64;
    keepalive_requests 100000;
  }
  server {
    listen 127.0.0.1:${port};
    location / {
      proxy_pass http://up;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }
  }
}
`
  await writeFile(path.join(dir, 'nginx.conf'), conf)
  const child: ChildProcess = spawn(binary, ['-c', path.join(dir, 'nginx.conf'), '-p', dir], {
    stdio: ['ignore', 'ignore', 'pipe'],
  })
  const forgetExit = onProcessExit(() => child.kill('SIGKILL'))
  const forgetReap = child.pid === undefined ? () => {} : reapPidOnDeath(child.pid)
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()))
  let stderr = ''
  child.stderr?.on('data', (chunk: Buffer) => (stderr += chunk.toString('utf8')))
  // Ready when it answers.
  const deadline = Date.now() + 10_000
  for (;;) {
    if (child.exitCode !== null) throw new Error(`nginx exited: ${stderr}`)
    try {
      await fetch(`http://127.0.0.1:${port}/`)
      break
    } catch {
      if (Date.now() > deadline) {
        child.kill('SIGKILL')
        throw new Error(`nginx did not start: ${stderr}`)
      }
      await new Promise((resolve) => setTimeout(resolve, 50))
    }
  }
  return {
    url: `http://127.0.0.1:${port}`,
    pid: child.pid ?? -1,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGQUIT') // graceful: the master stops its worker
        const timer = setTimeout(() => child.kill('SIGKILL'), 3000)
        await exited
        clearTimeout(timer)
      }
      forgetExit()
      forgetReap()
      await rm(dir, { recursive: true, force: true })
    },
  }
}
