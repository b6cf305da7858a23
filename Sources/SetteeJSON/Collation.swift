import Foundation

/// CouchDB/Couchbase view-key collation as **byte-comparable sort keys**: `encode(a) < encode(b)`
/// (plain `memcmp`, which is how SQLite compares BLOBs) exactly when key `a` sorts before key `b`.
/// The index stores the sort key as its primary order, so range scans come back in view order without
/// a custom SQLite collation callback.
///
/// Order: `null < false < true < numbers < strings < arrays < objects`.
/// - Numbers (either case) compare as doubles (`1 == 1.0`; `-0 == 0`), encoded as 8 order-preserving bytes.
/// - Arrays compare element by element, a prefix first (`[1,2] < [1,2,0]`).
/// - Objects compare member by member in emitted order (key, then value), a prefix first
///   (`{} < {"a":1} < {"a":1,"b":2}`), as Couchbase's `couch_raw_json_compare.c` does.
/// - Strings: a three-level approximation of ICU root-locale collation (what Couchbase uses):
///   1. primary: letters case- and accent-insensitively (canonical decomposition, combining marks
///      dropped, lowercased), with ASCII punctuation, symbols and digits in the DUCET order
///      (`_ - , ; : ! ? . ' " ( ) [ ] { } @ * / \ & # % ` ^ + < = > | ~ $ 0..9 a..z`), so
///      `"a" < "B" < "c"` and `"-" < "0" < "a"`;
///   2. secondary: accents (`"e" < "é"` when the rest is equal);
///   3. tertiary: case, lowercase first (`"a" < "A"`).
///   **Approximated**: non-ASCII base characters without a Latin decomposition (`ß`, `ø`, Greek,
///   CJK, ...) sort after all ASCII letters by code point instead of by the DUCET's script order;
///   control characters are not ignorable (they sort first); contractions and expansions (e.g.
///   `"æ" = "ae"` at primary level) are not modelled. Exact for ASCII, which is what the property
///   tests and the collation table cover.
public enum Collation {
    static let tagNull: UInt8 = 0x01
    static let tagFalse: UInt8 = 0x02
    static let tagTrue: UInt8 = 0x03
    static let tagNumber: UInt8 = 0x04
    static let tagString: UInt8 = 0x05
    static let tagArray: UInt8 = 0x06
    static let tagObject: UInt8 = 0x07
    /// Ends strings' levels, arrays and objects; below every tag and weight so prefixes sort first.
    static let end: UInt8 = 0x00
    /// Prefix of a non-ASCII primary/secondary weight: above every ASCII weight.
    static let wide: UInt8 = 0xF0

    /// The byte-comparable sort key of `value`.
    public static func encode(_ value: JSON) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(32)
        encode(value, into: &out)
        return out
    }

    public static func encode(_ value: JSON, into out: inout [UInt8]) {
        switch value {
        case .null: out.append(tagNull)
        case .bool(let b): out.append(b ? tagTrue : tagFalse)
        case .integer(let i): encodeNumber(double(i), into: &out)
        case .number(let d): encodeNumber(d, into: &out)
        case .string(let s):
            out.append(tagString)
            encodeString(s, into: &out)
        case .array(let items):
            out.append(tagArray)
            for item in items { encode(item, into: &out) }
            out.append(end)
        case .object(let members):
            out.append(tagObject)
            for (k, v) in members {
                out.append(tagString)
                encodeString(k, into: &out)
                encode(v, into: &out)
            }
            out.append(end)
        }
    }

    /// Both number cases sort as doubles, as CouchDB's and JavaScript's numbers do: integers beyond
    /// 2^53 that round to the same double sort equal.
    static func encodeNumber(_ d: Double, into out: inout [UInt8]) {
        out.append(tagNumber)
        let bits = (d == 0 ? 0.0 : d).bitPattern
        let ordered = (bits & (1 << 63)) != 0 ? ~bits : bits | (1 << 63)
        for shift in stride(from: 56, through: 0, by: -8) {
            out.append(UInt8(truncatingIfNeeded: ordered >> shift))
        }
    }

    /// `Double(i)`, rounded the same way, without the generic `Int128` conversion (it was most of the time a
    /// view's mappers spent on collating integer keys): `JSON.integer` holds `Int64.min ... UInt64.max`.
    static func double(_ i: Int128) -> Double {
        if let small = Int64(exactly: i) { return Double(small) }
        if let large = UInt64(exactly: i) { return Double(large) }
        return Double(i)
    }

    /// Compares two keys in collation order.
    public static func compare(_ a: JSON, _ b: JSON) -> Int {
        compareBytes(encode(a), encode(b))
    }

    /// `memcmp` order, shorter prefix first: how SQLite compares BLOBs.
    public static func compareBytes(_ a: [UInt8], _ b: [UInt8]) -> Int {
        let n = min(a.count, b.count)
        for i in 0..<n where a[i] != b[i] { return a[i] < b[i] ? -1 : 1 }
        return a.count == b.count ? 0 : (a.count < b.count ? -1 : 1)
    }

    // MARK: Strings

    /// ASCII primary weights (DUCET/CLDR root order for the printable ASCII range), 0 = unassigned.
    static let asciiPrimary: [UInt8] = {
        var table = [UInt8](repeating: 0, count: 128)
        // Controls first (ICU ignores them; we keep them, lowest), then whitespace, punctuation,
        // symbols, digits, letters.
        var w: UInt8 = 0x01
        for c in 0..<0x20 where ![0x09, 0x0A, 0x0B, 0x0C, 0x0D].contains(c) {
            table[c] = w
        }
        w += 1
        table[0x7F] = 0x01
        let order = "\t\n\u{0B}\u{0C}\r _-,;:!?.'\"()[]{}@*/\\&#%`^+<=>|~$0123456789abcdefghijklmnopqrstuvwxyz"
        for scalar in order.unicodeScalars {
            table[Int(scalar.value)] = w
            w += 1
        }
        for c in UInt8(ascii: "A")...UInt8(ascii: "Z") { table[Int(c)] = table[Int(c + 0x20)] }
        return table
    }()

    static func encodeString(_ s: String, into out: inout [UInt8]) {
        var asciiOnly = true
        for b in s.utf8 where b >= 0x80 {
            asciiOnly = false
            break
        }
        if asciiOnly {
            // Primary: weights; secondary: none (all base letters unaccented); tertiary: case.
            var hasUpper = false
            for b in s.utf8 {
                out.append(asciiPrimary[Int(b)])
                if b >= 0x41 && b <= 0x5A { hasUpper = true }
            }
            out.append(end)
            for _ in s.utf8 { out.append(0x01) }
            out.append(end)
            if hasUpper {
                for b in s.utf8 { out.append(b >= 0x41 && b <= 0x5A ? 0x02 : 0x01) }
            } else {
                for _ in s.utf8 { out.append(0x01) }
            }
            out.append(end)
            return
        }
        // Canonical decomposition: a base character followed by its combining marks.
        var primary: [UInt8] = []
        var secondary: [UInt8] = []
        var tertiary: [UInt8] = []
        for scalar in s.decomposedStringWithCanonicalMapping.unicodeScalars {
            let props = scalar.properties
            if props.canonicalCombiningClass.rawValue != 0 || props.generalCategory == .nonspacingMark {
                // A mark: refine the previous character's secondary weight.
                if !secondary.isEmpty, secondary.last == 0x01 { secondary.removeLast() }
                appendWide(scalar.value, into: &secondary)
                continue
            }
            if scalar.isASCII {
                let v = Int(scalar.value)
                primary.append(asciiPrimary[v])
                tertiary.append(v >= 0x41 && v <= 0x5A ? 0x02 : 0x01)
            } else {
                let lower = props.lowercaseMapping.unicodeScalars
                let base = lower.count == 1 ? lower.first! : scalar
                appendWide(base.value, into: &primary)
                tertiary.append(base == scalar ? 0x01 : 0x02)
            }
            secondary.append(0x01)
        }
        out.append(contentsOf: primary)
        out.append(end)
        out.append(contentsOf: secondary)
        out.append(end)
        out.append(contentsOf: tertiary)
        out.append(end)
    }

    /// `0xF0` then the code point in 3 bytes: above every one-byte weight, fixed width so positions
    /// stay aligned while bytes are equal.
    @inline(__always)
    static func appendWide(_ v: UInt32, into out: inout [UInt8]) {
        out.append(wide)
        out.append(UInt8(truncatingIfNeeded: v >> 16))
        out.append(UInt8(truncatingIfNeeded: v >> 8))
        out.append(UInt8(truncatingIfNeeded: v))
    }
}
