use std::time::Duration;

use super::*;

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

#[test]
fn spec_5_6_item_exponential_doubles_per_failure_from_base() {
    let l = ItemExponential::new(ms(1), Duration::from_secs(1));
    let key = "one".to_owned();
    for (n, want) in [1, 2, 4, 8, 16].into_iter().enumerate() {
        assert_eq!(RateLimiter::when(&l, &key), ms(want), "failure {n}");
        assert_eq!(l.num_requeues(&key), n as u32 + 1, "+1 per call");
    }
    // Other items have their own count.
    assert_eq!(l.when(&"two".to_owned()), ms(1));
    l.forget(&key);
    assert_eq!(l.num_requeues(&key), 0);
    assert_eq!(l.when(&key), ms(1), "forget restarts at base");
}

#[test]
fn spec_5_6_item_exponential_caps_at_max() {
    let l = ItemExponential::new(ms(1), ms(10));
    let got: Vec<_> = (0..6).map(|_| l.when(&1u8)).collect();
    assert_eq!(got, [ms(1), ms(2), ms(4), ms(8), ms(10), ms(10)]);
}

#[test]
fn spec_5_6_item_exponential_5ms_to_1000s_exact_values() {
    let l = ItemExponential::new(ms(5), Duration::from_secs(1000));
    let got: Vec<_> = (0..20).map(|_| l.when(&"k")).collect();
    // 5 ms · 2^17 = 655.36 s is the last uncapped value; 2^18 would be 1310.72 s.
    assert_eq!(got[0], ms(5));
    assert_eq!(got[1], ms(10));
    assert_eq!(got[10], ms(5120));
    assert_eq!(got[17], ms(655_360));
    assert_eq!(got[18], Duration::from_secs(1000));
    assert_eq!(got[19], Duration::from_secs(1000));
}

#[test]
fn spec_5_6_item_exponential_never_overflows() {
    let l = ItemExponential::new(Duration::from_secs(u64::MAX / 2), Duration::MAX);
    // Shifting far past 64 bits must saturate at max, not wrap or panic.
    for _ in 0..200 {
        let d = l.when(&0u8);
        assert!(d >= Duration::from_secs(u64::MAX / 2));
    }
    assert_eq!(l.when(&0u8), Duration::MAX);
    let capped = ItemExponential::new(ms(5), Duration::from_secs(1000));
    {
        capped.failures.lock().insert(0u8, u32::MAX);
    }
    assert_eq!(capped.when(&0u8), Duration::from_secs(1000));
    assert_eq!(capped.num_requeues(&0u8), u32::MAX, "count saturates");
}

#[test]
fn item_fast_slow_switches_after_max_fast_attempts() {
    let l = ItemFastSlow::new(ms(5), Duration::from_secs(10), 3);
    let got: Vec<_> = (0..5).map(|_| l.when(&"k")).collect();
    assert_eq!(
        got,
        [
            ms(5),
            ms(5),
            ms(5),
            Duration::from_secs(10),
            Duration::from_secs(10)
        ]
    );
    assert_eq!(l.num_requeues(&"k"), 5);
    l.forget(&"k");
    assert_eq!(l.num_requeues(&"k"), 0);
    assert_eq!(l.when(&"k"), ms(5));
}

#[tokio::test(start_paused = true)]
async fn spec_5_6_bucket_delay_is_the_reservation_delay() {
    let b = Bucket::new(10.0, 100);
    // A full bucket: the burst goes through without delay.
    for i in 0..100 {
        assert_eq!(RateLimiter::<u8>::when(&b, &0), Duration::ZERO, "call {i}");
    }
    // Then one token per 100 ms, each reservation queued behind the previous ones.
    assert_eq!(RateLimiter::<u8>::when(&b, &0), ms(100));
    assert_eq!(RateLimiter::<u8>::when(&b, &0), ms(200));
    assert_eq!(RateLimiter::<u8>::when(&b, &0), ms(300));
    // 300 ms later the three promised tokens exist; the next waits one interval again.
    tokio::time::advance(ms(300)).await;
    assert_eq!(RateLimiter::<u8>::when(&b, &0), ms(100));
    // Refill is capped at the burst.
    tokio::time::advance(Duration::from_secs(3600)).await;
    for _ in 0..100 {
        assert_eq!(RateLimiter::<u8>::when(&b, &0), Duration::ZERO);
    }
    assert_eq!(RateLimiter::<u8>::when(&b, &0), ms(100));
    assert_eq!(RateLimiter::<u8>::num_requeues(&b, &0), 0);
}

#[tokio::test(start_paused = true)]
async fn bucket_with_fractional_refill_truncates_to_nanoseconds() {
    let b = Bucket::new(3.0, 1);
    assert_eq!(RateLimiter::<u8>::when(&b, &0), Duration::ZERO);
    // 1/3 s = 333,333,333.33… ns, truncated like Go's time.Duration(float64).
    assert_eq!(
        RateLimiter::<u8>::when(&b, &0),
        Duration::from_nanos(333_333_333)
    );
}

#[tokio::test(start_paused = true)]
async fn bucket_without_refill_or_burst_never_grants_more() {
    let zero_qps = Bucket::new(0.0, 2);
    assert_eq!(RateLimiter::<u8>::when(&zero_qps, &0), Duration::ZERO);
    assert_eq!(RateLimiter::<u8>::when(&zero_qps, &0), Duration::ZERO);
    assert_eq!(RateLimiter::<u8>::when(&zero_qps, &0), Duration::MAX);
    let zero_burst = Bucket::new(10.0, 0);
    assert_eq!(RateLimiter::<u8>::when(&zero_burst, &0), Duration::MAX);
    let unlimited = Bucket::new(f64::INFINITY, 0);
    assert_eq!(RateLimiter::<u8>::when(&unlimited, &0), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn spec_5_6_max_of_takes_the_largest_when_and_requeues_and_forgets_everywhere() {
    let fast = ItemExponential::new(ms(1), Duration::from_secs(1));
    let slow = ItemFastSlow::new(ms(3), ms(50), 2);
    let l: MaxOf<&str> = MaxOf::new(vec![Box::new(fast), Box::new(slow)]);
    // exp: 1,2,4,8 ; fast/slow: 3,3,50,50
    let got: Vec<_> = (0..4).map(|_| l.when(&"k")).collect();
    assert_eq!(got, [ms(3), ms(3), ms(50), ms(50)]);
    assert_eq!(l.num_requeues(&"k"), 4);
    l.forget(&"k");
    assert_eq!(l.num_requeues(&"k"), 0);
    // Both counters were cleared: back to max(1, 3).
    assert_eq!(l.when(&"k"), ms(3));
    assert_eq!(MaxOf::<u8>::new(Vec::new()).when(&0), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn spec_5_6_default_controller_rate_limiter_combines_exponential_and_bucket() {
    let l = default_controller_rate_limiter::<String>();
    let k = "ns/name".to_owned();
    // Per item: 5 ms, 10 ms, 20 ms ... while the bucket still has burst.
    assert_eq!(l.when(&k), ms(5));
    assert_eq!(l.when(&k), ms(10));
    assert_eq!(l.when(&k), ms(20));
    assert_eq!(l.num_requeues(&k), 3);
    // Use up the rest of the burst of 100 on fresh items (first failure: 5 ms each).
    for i in 0..97 {
        assert_eq!(l.when(&format!("other-{i}")), ms(5));
    }
    // Bucket exhausted: a fresh item now waits for the bucket (100 ms > 5 ms).
    assert_eq!(l.when(&"fresh".to_owned()), ms(100));
    l.forget(&k);
    assert_eq!(l.num_requeues(&k), 0);
}
