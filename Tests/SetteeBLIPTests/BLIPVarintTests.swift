import SetteeBLIP
import SetteeCore
import Testing

@Suite struct BLIPVarintTests {
    @Test func roundTripsEdgeAndRandomValues() {
        // Proves every value encodes to `length(of:)` bytes and decodes back, at the 7-bit boundaries and for seeded
        // random values (the seed printed so a failure replays).
        let seed = UInt64.random(in: 0...UInt64.max)
        print("BLIPVarintTests seed \(seed)")
        var rng = SplitMix64(seed: seed)
        var values: [UInt64] = [0, 1, 0x7F, 0x80, 0x3FFF, 0x4000, UInt64(UInt32.max), UInt64.max, UInt64.max - 1]
        for shift in 0..<64 { values.append(1 << UInt64(shift)) }
        for _ in 0..<2000 { values.append(rng.next() >> (rng.next() % 64)) }
        for v in values {
            let bytes = BLIPVarint.encoded(v)
            #expect(bytes.count == BLIPVarint.length(of: v))
            var i = 0
            #expect((try? BLIPVarint.decode(bytes, at: &i)) == v)
            #expect(i == bytes.count)
        }
        #expect(BLIPVarint.encoded(UInt64.max).count == 10)
        #expect(BLIPVarint.encoded(300) == [0xAC, 0x02])
    }

    @Test(arguments: [
        ([UInt8](), BLIPVarint.DecodeError.truncated),
        ([0x80], .truncated),
        ([0xFF, 0xFF, 0xFF], .truncated),
        ([UInt8](repeating: 0xFF, count: 9) + [0x02], .overflow),
        ([UInt8](repeating: 0xFF, count: 10) + [0x01], .overflow),
        ([UInt8](repeating: 0x80, count: 11), .overflow),
        ([UInt8](repeating: 0x80, count: 20) + [0], .overflow),
    ])
    func hostileBytesAreTypedErrors(bytes: [UInt8], expected: BLIPVarint.DecodeError) {
        // Proves truncated varints and ones longer than 64 bits (10 bytes with a 10th above 1, 11 or more bytes)
        // throw their typed error, leave the index alone, and never trap.
        var i = 0
        #expect(throws: expected) { try BLIPVarint.decode(bytes, at: &i) }
        #expect(i == 0)
    }
}
