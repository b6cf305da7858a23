import SetteeBenchKit
import SetteeCore
import Testing

/// The keys a connection or a smart-client lane asks for (`KeyCursor`): a preload's sequential pass writes every key
/// exactly once, however the connections share it.
@Suite struct KeyCursorTests {
    @Test(arguments: [1, 2, 3, 7, 16, 512])
    func theSharesOfASequentialPassCoverEveryKeyOnce(lanes: Int) {
        // Proves: the lanes' shares (first = 0 ..< lanes, stride = lanes) together hold each key of 0 ..< keys once,
        // and a share ends (nil) instead of wrapping around, for key counts below, at and above the lane count. The
        // smart client's lanes used to wrap, so a lane that took more turns wrote some keys twice and others never.
        for keys in [0, 1, lanes - 1, lanes, lanes + 1, 1_000, 1_003] {
            var rng = SplitMix64(seed: 1)
            var written: [Int] = []
            for lane in 0..<lanes {
                var cursor = KeyCursor(.sequential(first: lane, stride: lanes), keys: keys)
                while let key = cursor.next(&rng) { written.append(key) }
                #expect(cursor.next(&rng) == nil, "a finished share stays finished")
            }
            #expect(written.sorted() == Array(0..<keys), "\(lanes) lanes over \(keys) keys")
        }
    }

    @Test func aUniformOrderStaysInTheKeySpaceAndFollowsTheSeed() {
        // Proves: a uniform draw is in 0 ..< keys, never ends, and is the same sequence for the same seed.
        var a = KeyCursor(.uniform, keys: 10)
        var b = KeyCursor(.uniform, keys: 10)
        var ra = SplitMix64(seed: 7)
        var rb = SplitMix64(seed: 7)
        let first = (0..<1_000).compactMap { _ in a.next(&ra) }
        let second = (0..<1_000).compactMap { _ in b.next(&rb) }
        #expect(first.count == 1_000)
        #expect(first.allSatisfy { (0..<10).contains($0) })
        #expect(Set(first).count == 10)
        #expect(first == second)
        var empty = KeyCursor(.uniform, keys: 0)
        #expect(empty.next(&ra) == nil)
    }
}
