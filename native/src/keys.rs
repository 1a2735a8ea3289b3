//! 64-bit keys of decision ids, the same function as `monitor/ingest/keys.py` (checkpoints
//! hold them): FNV-1a over the id's Unicode code points, the length in code points folded in,
//! then the SplitMix64 finalizer. A call of several rows has one id per row, `<call>/<row>`.

const FNV_OFFSET: u64 = 0xCBF2_9CE4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01B3;

fn splitmix(mut h: u64) -> u64 {
    h ^= h >> 30;
    h = h.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94D0_49BB_1331_11EB);
    h ^ (h >> 31)
}

/// The FNV-1a state after `text`, and its length in code points.
fn fnv(mut h: u64, text: &str) -> (u64, u64) {
    let mut n = 0;
    for c in text.chars() {
        h = (h ^ u64::from(c)).wrapping_mul(FNV_PRIME);
        n += 1;
    }
    (h, n)
}

fn finish(h: u64, length: u64) -> u64 {
    splitmix((h ^ length).wrapping_mul(FNV_PRIME))
}

/// Appends the keys of a call's `rows` row ids to `out` and returns the longest id's length
/// in code points (as `RowIds.longest`). A one-row call's trailing NULs are not part of its
/// key (as `keys.id_keys`: checkpoints hold keys of ids whose NULs numpy dropped).
pub fn row_keys(call: &str, rows: i64, out: &mut Vec<u64>) -> u64 {
    if rows == 1 {
        let (h, n) = fnv(FNV_OFFSET, call.trim_end_matches('\0'));
        out.push(finish(h, n));
        return call.chars().count() as u64;
    }
    let (h, n) = fnv(FNV_OFFSET, call);
    let (h, n) = (fnv(h, "/").0, n + 1);
    let mut digits = String::new();
    for r in 0..rows {
        digits.clear();
        digits.push_str(&r.to_string());
        let (hr, k) = fnv(h, &digits);
        out.push(finish(hr, n + k));
    }
    n + (rows - 1).max(0).to_string().len() as u64
}
