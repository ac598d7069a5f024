import datetime, time, math, random, decimal, fractions
now = datetime.datetime(2024, 5, 17, 12, 30)
print(now.isoformat(), (now + datetime.timedelta(days=40)).strftime('%Y-%m-%d %A'))
print(math.sqrt(2), math.factorial(20), round(math.pi, 5))
random.seed(1); print(random.randint(1, 100), random.choice('abc'))
print(decimal.Decimal('0.1') + decimal.Decimal('0.2'), fractions.Fraction(3, 4) + fractions.Fraction(1, 6))
print(time.strftime('%H', time.gmtime(0)))
