import Testing

@testable import SetteeCore

/// Proves our key → vBucket mapping equals the Couchbase SDK's (vectors captured from the real C++
/// client against Couchbase Server) and that CRC32 matches zlib.
@Suite struct VBucketHashTests {
    @Test(arguments: [
        ("doc1", 389), ("doc2", 140), ("nope", 977), ("ctr", 136), ("ttl", 1006), ("nmvb-key", 802),
        ("key-0", 491), ("key-80", 455), ("k1", 526),
    ])
    func matchesSDK(key: String, vb: Int) {
        #expect(VBucketHash.vbucket(forKey: key).index == vb)
    }

    @Test func crc32MatchesZlib() {
        // zlib.crc32(b"123456789") == 0xCBF43926, the standard check value.
        #expect(CRC32.checksum(Array("123456789".utf8)) == 0xCBF4_3926)
        #expect(CRC32.checksum([UInt8]()) == 0)
    }

    @Test func crcIsIncremental() {
        let bytes = Array("hello, settee".utf8)
        let whole = CRC32.checksum(bytes)
        let part = bytes[0..<5].withUnsafeBytes { CRC32.update(0, $0) }
        let rest = bytes[5...].withUnsafeBytes { CRC32.update(part, $0) }
        #expect(whole == rest)
    }

    /// The slicing-by-8 CRC-32 equals the byte-at-a-time definition for every length 0...300 (every tail length),
    /// from an unaligned start, and when continued across any split point (splits inside an 8-byte step).
    @Test func slicingMatchesTheBytewiseDefinition() {
        func bytewise(_ bytes: [UInt8]) -> UInt32 {
            var c = ~UInt32(0)
            for b in bytes {
                c ^= UInt32(b)
                for _ in 0..<8 { c = (c & 1) != 0 ? (0xEDB8_8320 ^ (c >> 1)) : (c >> 1) }
            }
            return ~c
        }
        var rng = SystemRandomNumberGenerator()
        let data = (0..<300).map { _ in UInt8.random(in: 0...255, using: &rng) }
        for n in 0...300 {
            let slice = Array(data[0..<n])
            #expect(CRC32.checksum(slice) == bytewise(slice), "length \(n)")
        }
        let unaligned = Array(data[3..<250])
        #expect(unaligned.withUnsafeBytes { CRC32.checksum($0) } == bytewise(unaligned))
        let whole = bytewise(Array(data[0..<64]))
        for split in 0...64 {
            let part = data[0..<split].withUnsafeBytes { CRC32.update(0, $0) }
            #expect(data[split..<64].withUnsafeBytes { CRC32.update(part, $0) } == whole, "split \(split)")
        }
    }
}

/// Proves the coarse seconds a GET's expiry check reads agree with the precise clock: never ahead of it, and at most
/// one second behind (the coarse clock lags by a scheduler tick; a second boundary may fall between the two reads).
@Suite struct SystemWallClockTests {
    @Test func coarseSecondsTrackThePreciseClock() {
        let clock = SystemWallClock()
        for _ in 0..<1_000 {
            let before = clock.nowSeconds()
            let coarse = clock.nowSecondsCoarse()
            let after = clock.nowSeconds()
            #expect(coarse <= after)
            #expect(coarse + 1 >= before)
        }
    }
}

/// Proves CAS values never repeat or go backwards, including when the wall clock stands still or
/// steps back, and that a restored clock continues above its restored value.
@Suite struct HybridLogicalClockTests {
    @Test func monotonicUnderStillAndBackwardClock() {
        var hlc = HybridLogicalClock()
        let a = hlc.next(nowNanoseconds: 10_000_000_000)
        let b = hlc.next(nowNanoseconds: 10_000_000_000)
        let c = hlc.next(nowNanoseconds: 9_000_000_000)
        #expect(a < b && b < c)
        #expect(a.rawValue & 0xFFFF == 0)
    }

    @Test func restoredClockContinuesAbove() {
        var hlc = HybridLogicalClock(restoring: CAS(UInt64.max / 2))
        #expect(hlc.next(nowNanoseconds: 1).rawValue == UInt64.max / 2 + 1)
    }

    @Test func expiryRules() {
        #expect(Expiry.absolute(0, nowSeconds: 1000) == 0)
        #expect(Expiry.absolute(10, nowSeconds: 1000) == 1010)
        #expect(Expiry.absolute(2_592_001, nowSeconds: 1000) == 2_592_001)
        #expect(Expiry.isExpired(1010, nowSeconds: 1010))
        #expect(!Expiry.isExpired(0, nowSeconds: 1010))
    }

    @Test func aTimeToLiveBecomesTheExpiryToSend() {
        // Proves `Expiry.wire`: up to 30 days the seconds themselves (relative), past that an absolute time from now
        // (90 days: Sync Gateway's `local_doc_expiry_secs`), clamped rather than wrapped, and never for a TTL below 1.
        #expect(Expiry.wire(ttlSeconds: 4, nowSeconds: 1_700_000_000) == 4)
        #expect(Expiry.wire(ttlSeconds: 2_592_000, nowSeconds: 1_700_000_000) == 2_592_000)
        #expect(Expiry.wire(ttlSeconds: 90 * 86_400, nowSeconds: 1_700_000_000) == 1_700_000_000 + 90 * 86_400)
        #expect(Expiry.wire(ttlSeconds: Int.max, nowSeconds: 1_700_000_000) == UInt32.max)
        #expect(Expiry.wire(ttlSeconds: 0, nowSeconds: 5) == 0 && Expiry.wire(ttlSeconds: -3, nowSeconds: 5) == 0)
    }
}
