/**
 * A fetcher that holds its slot until the test writes `$DATA_DIR/go`. It also ends when the station's
 * folder is gone: a test removes its station at the end, and a holder that missed its `go` would
 * otherwise loop for ever, its spawner keeping the test file's output open so the file never ends.
 */
export const UNTIL_GO = ['sh', '-c', 'until [ -e "$DATA_DIR/go" ] || [ ! -d "$DATA_DIR" ]; do sleep 0.1; done'];
