import SetteeCore
import Testing

/// The one random id: always 32 lowercase hex digits, each half padded on its own (a copy it replaced padded
/// the concatenation, so `1`+`23` and `12`+`3` gave the same id), and reproducible from a seeded generator.
@Suite struct RandomIDTests {
    /// A fixed sequence of 64-bit values.
    struct Sequence: RandomNumberGenerator {
        var values: [UInt64]
        mutating func next() -> UInt64 { values.isEmpty ? 0 : values.removeFirst() }
    }

    @Test func eachHalfIsSixteenDigits() {
        var small = Sequence(values: [0x1, 0x23])
        #expect(RandomID.hex128(using: &small) == "0000000000000001" + "0000000000000023")
        var other = Sequence(values: [0x12, 0x3])
        #expect(RandomID.hex128(using: &other) == "0000000000000012" + "0000000000000003")
        var max = Sequence(values: [.max, 0])
        #expect(RandomID.hex128(using: &max) == "ffffffffffffffff0000000000000000")
    }

    @Test func systemIdsAreWellFormedAndDistinct() {
        let ids = (0..<1000).map { _ in RandomID.hex128() }
        #expect(Set(ids).count == ids.count)
        #expect(ids.allSatisfy { $0.utf8.count == 32 && $0.utf8.allSatisfy { PercentEncoding.hexValue($0) != nil } })
        #expect(ids.allSatisfy { $0 == $0.lowercased() })
    }
}
