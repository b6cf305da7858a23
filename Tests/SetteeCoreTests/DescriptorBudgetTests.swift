import SetteeCore
import Testing

/// Connection caps against a process's descriptor limit.
@Suite struct DescriptorBudgetTests {
    /// Proves caps that fit are left alone, and caps that do not are scaled down proportionally so that they
    /// plus the reserve fit under the limit (1,024 descriptors: the default that idle connections exhausted).
    @Test func capsFitTheDescriptorLimit() {
        let caps = [Limits.maxConnections, Limits.maxAdminConnections, Limits.maxViewsConnections]
        #expect(DescriptorBudget.fit(caps, descriptorLimit: 1_000_000) == caps)
        let fitted = DescriptorBudget.fit(caps, descriptorLimit: 1024)
        #expect(fitted.reduce(0, +) + Limits.reservedDescriptors <= 1024)
        #expect(fitted[0] > fitted[1] && fitted[1] == fitted[2])
        #expect(fitted.allSatisfy { $0 >= DescriptorBudget.minimumCap })
    }

    /// Proves a limit below the reserve still leaves every port its minimum (an operator can get in).
    @Test func tinyLimitKeepsMinimumCaps() {
        #expect(DescriptorBudget.fit([10_000, 1_000], descriptorLimit: 100) == [16, 16])
    }
}
