// CPU time of processes from /proc (Linux): utime + stime of each PID and of its threads' children
// (nginx workers), in seconds. Taken before and after a load round, the difference divided by the
// requests is the server's CPU per request.
import { execFileSync } from 'node:child_process'
import { readdirSync, readFileSync } from 'node:fs'

let ticksPerSecond: number | undefined
function clockTicks(): number {
  if (ticksPerSecond === undefined) {
    try {
      ticksPerSecond = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100
    } catch {
      ticksPerSecond = 100
    }
  }
  return ticksPerSecond
}

/** Seconds of CPU (user + system) used so far by `pid`; 0 when it is gone. */
export function cpuSeconds(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
    // Fields after the command name (which is in parentheses and may contain spaces).
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
    const utime = Number(fields[11])
    const stime = Number(fields[12])
    return (utime + stime) / clockTicks()
  } catch {
    return 0
  }
}

/** Direct children of `pid` (e.g. an nginx master's workers). */
export function childrenOf(pid: number): number[] {
  try {
    return readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8')
      .trim()
      .split(/\s+/)
      .filter(Boolean)
      .map(Number)
  } catch {
    return []
  }
}

/** CPU seconds of a process and its children. */
export function treeCpuSeconds(pid: number): number {
  return [pid, ...childrenOf(pid)].reduce((sum, p) => sum + cpuSeconds(p), 0)
}

/** Seconds `pid` (all its threads, and its children) spent on a CPU (`run`: system calls and the
 * network work the kernel does for them included) and runnable but waiting for one (`wait`), from
 * /proc/<pid>/task/<tid>/schedstat; zeros when it is gone. */
export function schedSeconds(pid: number): { run: number; wait: number } {
  let run = 0
  let wait = 0
  for (const p of [pid, ...childrenOf(pid)]) {
    let tasks: string[] = []
    try {
      tasks = readdirSync(`/proc/${p}/task`)
    } catch {
      continue
    }
    for (const task of tasks) {
      try {
        const [onCpu, queued] = readFileSync(`/proc/${p}/task/${task}/schedstat`, 'utf8').split(' ')
        run += Number(onCpu) / 1e9
        wait += Number(queued) / 1e9
      } catch {
        // the thread ended meanwhile
      }
    }
  }
  return { run, wait }
}

/** Seconds all CPUs of the machine have been busy (not idle, not waiting for I/O), from /proc/stat. */
export function machineBusySeconds(): number {
  const fields = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/).slice(1).map(Number)
  const [user, nice, system, , , irq, softirq, steal] = fields as number[]
  return (
    ((user ?? 0) + (nice ?? 0) + (system ?? 0) + (irq ?? 0) + (softirq ?? 0) + (steal ?? 0)) / clockTicks()
  )
}
