/**
 * The candidate a mistyped word most likely meant (`puase` → `pause`), or null when none is close:
 * the smallest Damerau-Levenshtein distance (a swap of two neighbours counts once), at most 40 % of
 * the word changed, ties to the earlier candidate. Case differences count as no change.
 */
export function closestWord(word: string, candidates: readonly string[]): string | null {
  const typed = word.toLowerCase();
  let best: string | null = null;
  let bestDistance = Infinity;
  for (const candidate of candidates) {
    const d = distance(typed, candidate.toLowerCase());
    if (d < bestDistance && d <= Math.max(1, Math.floor(Math.max(typed.length, candidate.length) * 0.4))) {
      best = candidate;
      bestDistance = d;
    }
  }
  return best;
}

/** `; did you mean pause?` or nothing. */
export function didYouMean(word: string, candidates: readonly string[]): string {
  const close = closestWord(word, candidates);
  return close === null ? '' : `; did you mean ${close}?`;
}

function distance(a: string, b: string): number {
  const d: number[][] = Array.from({ length: a.length + 1 }, (_, i) =>
    Array.from({ length: b.length + 1 }, (_, j) => (i === 0 ? j : j === 0 ? i : 0)),
  );
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      d[i][j] = Math.min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) d[i][j] = Math.min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.length][b.length];
}
