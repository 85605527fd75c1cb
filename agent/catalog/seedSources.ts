import type { PoolName } from '../../shared/protocol';

/**
 * The 25 sources of the operations standard (seed 000, section 2) with their pools. The seed lists
 * both `td` and `tesouro-direto`; they are one source, so `td` is an alias.
 * `schedule` is the default 24-hour grid: heavy-io sources each get their own hour, so no two are
 * due together and the pools' RAM ceiling (27 GB) holds; the light pools share the gaps.
 */
export interface SeedSource {
  name: string;
  pool: PoolName;
  aliases?: string[];
  schedule: string;
}

export const SEED_SOURCES: readonly SeedSource[] = [
  { name: 'comex', pool: 'heavy-io', schedule: '0 0 * * *' },
  { name: 'anac', pool: 'heavy-io', schedule: '0 1 * * *' },
  { name: 'tse', pool: 'heavy-io', schedule: '0 2 * * *' },
  { name: 'rfb-cnpj', pool: 'heavy-io', schedule: '0 3 * * *' },
  { name: 'pdet', pool: 'heavy-io', schedule: '0 4 * * *' },
  { name: 'datasus', pool: 'heavy-io', schedule: '0 5 * * *' },
  { name: 'tesouro-direto', pool: 'heavy-io', aliases: ['td'], schedule: '0 6 * * *' },
  { name: 'inmet', pool: 'heavy-io', schedule: '0 7 * * *' },
  { name: 'anp', pool: 'heavy-io', schedule: '0 8 * * *' },
  { name: 'b3', pool: 'heavy-io', schedule: '0 9 * * *' },
  { name: 'pgfn', pool: 'heavy-io', schedule: '0 10 * * *' },
  { name: 'ons', pool: 'heavy-io', schedule: '0 11 * * *' },
  { name: 'capes', pool: 'heavy-io', schedule: '0 12 * * *' },
  { name: 'transparencia-sp', pool: 'heavy-io', schedule: '0 13 * * *' },
  { name: 'antt', pool: 'heavy-io', schedule: '0 14 * * *' },
  { name: 'cvm', pool: 'cpu-analysis', schedule: '30 15 * * *' },
  { name: 'inep', pool: 'cpu-analysis', schedule: '30 17 * * *' },
  { name: 'bcb-microdados', pool: 'cpu-analysis', schedule: '30 19 * * *' },
  { name: 'rtn', pool: 'network-light', schedule: '15 6 * * *' },
  { name: 'bcb-sgs', pool: 'network-light', schedule: '15 */6 * * *' },
  { name: 'sidra', pool: 'network-light', schedule: '45 7 * * *' },
  { name: 'loterias', pool: 'network-light', schedule: '15 21 * * *' },
  { name: 'ipeadata', pool: 'network-light', schedule: '45 9 * * *' },
  { name: 'infosiga', pool: 'network-light', schedule: '45 11 * * *' },
  { name: 'sigtap', pool: 'network-light', schedule: '45 13 * * *' },
];
