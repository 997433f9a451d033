// Whether this replica still holds a running refit, as its legs ask before each engine call. After
// a lapse of the lease the journal is read afresh (another replica may have taken the refit); every
// leg in flight asks at that moment, so the legs share one read per lapse instead of each reading
// the whole journal (at 1,000 engines, thousands of reads of a journal of hundreds of KiB). It
// never writes the journal and never decides anything the read does not say.

export interface StillOursDeps {
  /** How many times the lease has lapsed so far (LeaseFence.lapses; 0 without a fence). */
  lapses(): number;
  /** The journal writer already knows another replica holds the refit. */
  fenced(): boolean;
  /** Reads the journal: true while it names this replica, false when not, undefined when unreadable. */
  confirm(): Promise<boolean | undefined>;
}

export class StillOurs {
  private confirmedLapses: number;
  private reading: { lapses: number; held: Promise<boolean | undefined> } | null = null;

  constructor(private readonly deps: StillOursDeps) {
    this.confirmedLapses = deps.lapses();
  }

  /** True without a read while no lapse happened since the last confirmation. */
  ask(): Promise<boolean | undefined> | boolean {
    if (this.deps.fenced()) return false;
    const lapses = this.deps.lapses();
    if (lapses === this.confirmedLapses) return true;
    if (this.reading?.lapses !== lapses) {
      const held = this.deps.confirm().then((h) => {
        if (h === true && lapses > this.confirmedLapses) this.confirmedLapses = lapses;
        return h;
      });
      const reading = { lapses, held };
      this.reading = reading;
      // An unreadable journal is read again by the next ask, not answered from this one for ever.
      void held.finally(() => {
        if (this.reading === reading) this.reading = null;
      });
    }
    return this.reading!.held;
  }
}
