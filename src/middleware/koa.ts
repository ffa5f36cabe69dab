/**
 * Placeholder: the koa middleware arrives with its own issue. Importing `tollgate/koa` works today
 * so the exports map can be relied on; it exports nothing yet.
 */
export {}
