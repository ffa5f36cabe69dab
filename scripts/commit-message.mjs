#!/usr/bin/env node
// The commit message rule (docs/development.md, "Commits"): a subject `area: imperative summary` of at
// most 72 characters, then a blank line before any body. `node scripts/commit-message.mjs FILE`
// checks one message (the commit-msg hook in .githooks/ runs it); `--since REV` checks every commit
// after REV on HEAD. test/unit/commit-messages.test.ts checks main's history since the rule began.
/* global process, console */
import { execFileSync } from 'node:child_process'
import { readFileSync } from 'node:fs'

export const MAX_SUBJECT = 72
const SUBJECT = /^[a-z0-9][a-z0-9/._-]*(?: [a-z0-9/._-]+)?: \S/

/** What is wrong with a commit message, in the committer's words; empty when nothing is. */
export function problems(message) {
  const lines = message
    .split('\n')
    .filter((line) => !line.startsWith('#'))
    .map((line) => line.replace(/\s+$/, ''))
  while (lines.length > 0 && lines.at(-1) === '') lines.pop()
  const subject = lines[0] ?? ''
  const found = []
  if (subject.length > MAX_SUBJECT)
    found.push(
      `the subject has ${subject.length} characters: keep it to ${MAX_SUBJECT}, and move the rest to the body`,
    )
  if (!SUBJECT.test(subject))
    found.push(
      'the subject should read "area: imperative summary", e.g. "store: load ioredis only for a URL"',
    )
  if (lines.length > 1 && lines[1] !== '') found.push('leave a blank line between the subject and the body')
  return found
}

/** [hash, message] of every commit after `rev` on HEAD, newest first. */
export function messagesSince(rev, cwd = process.cwd()) {
  return execFileSync('git', ['log', '--format=%h%x00%B%x01', `${rev}..HEAD`], { cwd, encoding: 'utf8' })
    .split('\x01')
    .map((entry) => entry.replace(/^\n/, ''))
    .filter(Boolean)
    .map((entry) => entry.split('\x00'))
}

function main(args) {
  const since = args.indexOf('--since')
  const messages =
    since === -1 ? [[args[0] ?? '', readFileSync(args[0] ?? '', 'utf8')]] : messagesSince(args[since + 1])
  let failed = false
  for (const [name, message] of messages) {
    for (const problem of problems(message)) {
      failed = true
      console.error(`${name}: ${problem}`)
    }
  }
  process.exit(failed ? 1 : 0)
}

if (process.argv[1] && import.meta.url.endsWith(process.argv[1].replace(/^.*\//, '/')))
  main(process.argv.slice(2))
