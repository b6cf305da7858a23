import Logging
import SetteeCore
import SetteeHTTPServer
import Testing

/// `ConnectionCap` holds a port's cap however connections arrive: one read of the listening socket accepts up to
/// `acceptsPerRead` connections, which took Hummingbird's `MaximumAvailableConnections` past its cap.
@Suite struct ConnectionCapTests {
    static let logger = Logger(label: "cap-test")

    /// One read as SwiftNIO's server channel performs it: issued only if the delegate accepts, then up to
    /// `acceptsPerRead` pending connections accepted (each counted as it is). Returns how many were accepted.
    static func read(_ cap: inout ConnectionCap, pending: inout Int) -> Int {
        guard cap.isAcceptingNewConnections() else { return 0 }
        let n = min(pending, cap.acceptsPerRead)
        for _ in 0..<n { cap.connectionOpened() }
        pending -= n
        return n
    }

    /// Proves the case the listener test found: 60 open and a burst of 5 waiting. A read at 60 of 64 accepts four
    /// (64), the fifth waits until one closes.
    @Test func aBurstAtTheCapStopsAtTheCap() {
        var cap = ConnectionCap(64, logger: Self.logger)
        var pending = 60
        while Self.read(&cap, pending: &pending) > 0 {}
        #expect(cap.openConnections == 60 && pending == 0)
        pending = 5
        #expect(Self.read(&cap, pending: &pending) == 4)
        #expect(cap.openConnections == 64)
        #expect(Self.read(&cap, pending: &pending) == 0 && pending == 1)
        cap.connectionClosed()
        // 63 open: a read could take it to 67, so the port still waits until a full read fits.
        #expect(!cap.isAcceptingNewConnections())
        for _ in 0..<3 { cap.connectionClosed() }
        #expect(Self.read(&cap, pending: &pending) == 1 && cap.openConnections == 61)
    }

    /// Proves with seeded histories (bursts of arrivals, closes, reads in any order; the seed is printed) that the
    /// open count never passes the cap and that the port never stalls: with connections waiting and fewer than
    /// `cap - acceptsPerRead + 1` open, a read accepts.
    @Test(arguments: [1, 4, 5, 64, 500]) func seededHistoriesNeverPassTheCap(maxConnections: Int) {
        let seed = UInt64.random(in: 1...UInt64.max)
        print("ConnectionCapTests seed \(seed) cap \(maxConnections)")
        var rng = SplitMix64(seed: seed)
        var cap = ConnectionCap(maxConnections, logger: Self.logger)
        var pending = 0
        var most = 0
        for _ in 0..<20_000 {
            switch rng.next() % 3 {
            case 0: pending += Int(rng.next() % 6)
            case 1:
                if cap.openConnections > 0 { cap.connectionClosed() }
            default:
                let before = cap.openConnections
                let accepted = Self.read(&cap, pending: &pending)
                if pending + accepted > 0 && before + cap.acceptsPerRead <= cap.maxConnections {
                    #expect(accepted > 0, "seed \(seed): stalled at \(before) open")
                }
            }
            most = max(most, cap.openConnections)
            // A cap below one read's size accepts while none is open, so there one read may pass it.
            #expect(cap.openConnections <= max(maxConnections, cap.acceptsPerRead), "seed \(seed)")
        }
        if maxConnections >= cap.acceptsPerRead {
            #expect(most <= maxConnections, "seed \(seed): \(most) open")
        }
    }
}
