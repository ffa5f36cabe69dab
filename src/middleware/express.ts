/**
 * Placeholder: the express middleware arrives with its own issue. Importing `tollgate/express` works today
 * so the exports map can be relied on; it exports nothing yet.
 */
export {}
